#!/usr/bin/env python3
"""A gRPC client for agentd in Python: default grpcio options, stubs made from
proto/ at run time. Lists the conversations of a folder, or continues one.

  agentx_client.py list [--folder DIR]
  agentx_client.py turn ID MESSAGE [--folder DIR]
  agentx_client.py services            (reflection v1alpha, then health)

The socket is $AGENTX_SOCKET, else $AGENTX_HOME/agentd.sock, else
~/.agentx/agentd.sock (agentd must be running: `agentx daemon start`). A turn
uses $AGENTX_BASE_URL, $AGENTX_MODEL, $AGENTX_PROVIDER and $OPENAI_API_KEY.
Needs grpcio, grpcio-tools, grpcio-reflection, grpcio-health-checking (tests/python-requirements.txt).
"""

import argparse
import atexit
import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import grpc
from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parents[2] / "proto"


def stubs():
    """Generates the Python modules for proto/ into a temp dir; imports them."""
    out = tempfile.mkdtemp(prefix="agentx-stubs-")
    # The modules are imported below and stay in memory: the files can go
    # when the client exits.
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    files = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    include = Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}", *files]
    if protoc.main(args) != 0:
        sys.exit("protoc failed on " + str(PROTO_ROOT))
    sys.path.insert(0, out)
    names = ["common", "sessions", "turns"]
    pb = {n: importlib.import_module(f"agentx.v1.{n}_pb2") for n in names}
    grpc_mods = {n: importlib.import_module(f"agentx.v1.{n}_pb2_grpc") for n in ["sessions", "turns"]}
    return pb, grpc_mods


def socket_path():
    if os.environ.get("AGENTX_SOCKET"):
        return os.environ["AGENTX_SOCKET"]
    home = os.environ.get("AGENTX_HOME") or os.path.expanduser("~/.agentx")
    return os.path.join(home, "agentd.sock")


def scope(pb, folder):
    return pb["common"].Scope(folder=os.path.realpath(folder), agent="")


def list_sessions(channel, pb, grpc_mods, folder):
    stub = grpc_mods["sessions"].SessionsStub(channel)
    reply = stub.ListSessions(pb["sessions"].ListSessionsRequest(scope=scope(pb, folder)))
    for s in reply.sessions:
        print(f"{s.id}\t{s.turns}\t{s.title}")


def run_turn(channel, pb, grpc_mods, folder, session_id, message):
    turns = pb["turns"]
    start = turns.TurnStart(
        scope=scope(pb, folder),
        session_id=session_id,
        message=message,
        approval=turns.APPROVAL_POLICY_NEVER,
        provider=turns.ProviderSettings(
            provider=os.environ.get("AGENTX_PROVIDER", "responses"),
            base_url=os.environ.get("AGENTX_BASE_URL", ""),
            model=os.environ.get("AGENTX_MODEL", ""),
            api_key=os.environ.get("OPENAI_API_KEY", ""),
        ),
        client_pid=os.getpid(),
    )
    stub = grpc_mods["turns"].TurnsStub(channel)
    answer = []
    for event in stub.RunTurn(iter([turns.TurnInput(start=start)])):
        kind = event.WhichOneof("event")
        if kind == "answer_chunk":
            answer.append(event.answer_chunk)
        elif kind == "finished":
            f = event.finished
            text = "".join(answer) if f.text_in_chunks else f.text
            print(text)
            if f.error:
                sys.exit(f"turn failed: {f.error}")
            return
    sys.exit("the turn's stream ended without `finished`")


def services(channel):
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    request = reflection_pb2.ServerReflectionRequest(list_services="")
    for reply in stub.ServerReflectionInfo(iter([request])):
        for s in reply.list_services_response.service:
            print(s.name)
    health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""))
    print("health:", health_pb2.HealthCheckResponse.ServingStatus.Name(health.status))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list")
    p.add_argument("--folder", default=".")
    p = sub.add_parser("turn")
    p.add_argument("id")
    p.add_argument("message")
    p.add_argument("--folder", default=".")
    sub.add_parser("services")
    args = parser.parse_args()

    # Default options: no grpc.default_authority, as any grpc-core client.
    with grpc.insecure_channel("unix:" + socket_path()) as channel:
        if args.command == "services":
            services(channel)
            return
        pb, grpc_mods = stubs()
        if args.command == "list":
            list_sessions(channel, pb, grpc_mods, args.folder)
        else:
            run_turn(channel, pb, grpc_mods, args.folder, args.id, args.message)


if __name__ == "__main__":
    main()
