//! Every end-to-end test of agentx and agentd in one test binary (one link of
//! the workspace instead of one per file); each module is one area.
//!
//! Run one area with `cargo test -p agentx-tests --test e2e AREA::`, e.g.
//! `cargo test -p agentx-tests --test e2e remote_lines::`.

mod answer_rendering;
mod background_priority;
mod blind_spots;
mod chat;
mod chat_completions;
mod composer;
mod daemon_lifecycle;
mod diff;
mod disk_full;
mod first_run;
mod grpc_surface;
mod instruction_files;
mod library;
mod lifecycle_hostile;
mod listings;
mod llama_server;
mod long_conversations;
mod mcp;
mod oneshot_approval;
mod oneshots;
mod pipes;
mod provider_bounds;
mod provider_hostile;
mod provider_quirks;
mod python_client;
mod recovery;
mod remote;
mod remote_continue;
mod remote_lines;
mod remote_listen;
mod remote_slow;
mod repl_terminal;
mod resilience;
mod resume_replay;
mod rewind_to;
mod sandbox;
mod several_clients;
mod slow_readers;
mod snapshots;
mod systemd;
mod terminal_safety;
mod terminal_ui;
mod tool_env;
mod tool_processes;
mod torture;
mod turn_bounds;
mod two_checkouts;
mod web;
