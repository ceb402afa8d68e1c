// agentx web view: a thin page over the local `agentx web` API. Plain DOM,
// no build step; every text from a conversation goes in as text, never HTML.
"use strict";

const main = () => document.getElementById("main");
let info = null;

// ---- the key ------------------------------------------------------------
// The login URL `agentx web` printed works once: it sends this tab to
// `/#key=…`. The key goes into this tab's sessionStorage and out of the
// address bar; every API call sends it as a header. No cookie: browsers
// send cookies to every port of 127.0.0.1.

(function takeKey() {
  const m = location.hash.match(/^#key=([0-9a-f]{64})$/);
  if (!m) return;
  sessionStorage.setItem("agentx-key", m[1]);
  history.replaceState(null, "", "/");
})();

function withKey(headers) {
  return Object.assign({ "X-Agentx-Key": sessionStorage.getItem("agentx-key") || "" }, headers || {});
}

// ---- small helpers ------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function hashFor(route, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const s = q.toString();
  return "#/" + route + (s ? "?" + s : "");
}

function when(ms) {
  if (!ms) return "";
  const secs = Math.round((Date.now() - ms) / 1000);
  if (secs < 60) return "just now";
  if (secs < 3600) return Math.floor(secs / 60) + " min ago";
  if (secs < 86400) return Math.floor(secs / 3600) + " h ago";
  return new Date(ms).toLocaleString();
}

// A relative time, with the absolute one on hover.
function timeEl(ms) {
  if (!ms) return "";
  const d = new Date(ms);
  return el("time", { datetime: d.toISOString(), title: d.toLocaleString(undefined, { dateStyle: "full", timeStyle: "medium" }), text: when(ms) });
}

async function api(path, params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") q.set(k, v);
  }
  const res = await fetch("/api/" + path + (q.toString() ? "?" + q : ""), { headers: withKey() });
  return answer(res);
}

async function post(path, body) {
  const res = await fetch("/api/" + path, {
    method: "POST",
    headers: withKey({ "Content-Type": "application/json" }),
    body: JSON.stringify(body),
  });
  return answer(res);
}

async function answer(res) {
  let body = null;
  try { body = await res.json(); } catch (_) { body = null; }
  if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
  return body;
}

function show(...nodes) {
  const m = main();
  // Parts a view leaves out (null) are left out, not shown as "null".
  m.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined && n !== false));
}

function fail(err) {
  show(el("p", { class: "error", role: "alert", text: String(err.message || err) }));
}

function where(folder, agent) {
  const a = agent || (info && info.agent) || "";
  return (folder || (info && info.folder) || "") + (a && a !== "default" ? " · agent " + a : "");
}

// ---- routing ------------------------------------------------------------

// After a link is followed, the keyboard focus moves to the new content
// (unless the view put it somewhere itself).
let followed = false;

function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [name, query] = hash.split("?");
  const params = Object.fromEntries(new URLSearchParams(query || ""));
  for (const a of document.querySelectorAll("header nav a")) a.removeAttribute("aria-current");
  const nav = { "": "nav-list", c: "nav-list", search: "nav-search", snapshots: "nav-snapshots", diff: "nav-snapshots" }[name];
  if (nav) document.getElementById(nav).setAttribute("aria-current", "page");
  const views = { "": listView, c: conversationView, search: searchView, snapshots: snapshotsView, diff: diffView };
  const view = views[name] || listView;
  const moveFocus = followed;
  followed = false;
  Promise.resolve(view(params)).catch(fail).then(() => {
    const m = main();
    if (moveFocus && !m.contains(document.activeElement)) m.focus({ preventScroll: true });
  });
}

window.addEventListener("hashchange", () => { followed = true; route(); });
document.addEventListener("keydown", (e) => {
  const typing = /^(INPUT|TEXTAREA|SELECT)$/.test(document.activeElement.tagName);
  if (e.key === "/" && !typing) {
    e.preventDefault();
    const box = document.querySelector("input[type=search]");
    if (box) box.focus(); else location.hash = "#/search";
  }
});
document.addEventListener("DOMContentLoaded", async () => {
  try {
    info = await api("info");
    document.getElementById("where").textContent = where();
  } catch (err) { fail(err); return; }
  route();
});

// ---- conversations ------------------------------------------------------

async function listView(params) {
  const started = performance.now();
  const data = await api("sessions", { folder: params.folder, agent: params.agent });
  const folderBox = el("input", { type: "text", name: "folder", value: data.folder, "aria-label": "Folder" });
  const form = el("form", { class: "bar", role: "search", onsubmit: (e) => {
    e.preventDefault();
    location.hash = hashFor("", { folder: folderBox.value });
  } }, folderBox, el("button", { type: "submit", text: "Show folder" }));
  const byId = new Map(data.sessions.map((s) => [s.id, s]));
  const children = new Map();
  const roots = [];
  for (const s of data.sessions) {
    const parent = s.forked_from && byId.has(s.forked_from.id) ? s.forked_from.id : null;
    if (parent) {
      if (!children.has(parent)) children.set(parent, []);
      children.get(parent).push(s);
    } else roots.push(s);
  }
  const item = (s) => {
    const link = el("a", { href: hashFor("c", { id: s.id, folder: s.folder, agent: s.agent }), class: "session" },
      s.title || "(untitled)");
    const meta = el("span", { class: "meta" },
      " · " + s.turns + (s.turns === 1 ? " turn" : " turns") + " · ", timeEl(s.updated_ms), " · " + s.id.slice(0, 8),
      s.forked_from ? " · forked at turn " + s.forked_from.turn : "");
    const li = el("li", { "data-id": s.id }, el("div", {}, link,
      s.location !== "local" ? el("span", { class: "badge", text: s.location }) : null, meta));
    const kids = children.get(s.id);
    if (kids) li.append(el("ul", { "aria-label": "forks" }, kids.map(item)));
    return li;
  };
  // The first screenful now; the rest in slices that never block input.
  const FIRST = 150;
  const list = el("ul", { class: "sessions", id: "sessions" }, roots.slice(0, FIRST).map(item));
  let next = FIRST;
  const more = () => {
    if (next >= roots.length) { document.body.dataset.completeAt = String(performance.now()); return; }
    const frag = document.createDocumentFragment();
    for (const s of roots.slice(next, next + 500)) frag.append(item(s));
    next += 500;
    list.append(frag);
    setTimeout(more, 0);
  };
  show(
    el("h1", { text: "Conversations" }),
    form,
    el("p", { class: "meta" }, data.sessions.length + " conversation(s), newest first; forks under their origin."),
    data.remote_note ? el("p", { class: "note", text: data.remote_note }) : null,
    list,
  );
  delete document.body.dataset.completeAt;
  document.body.dataset.ready = "list";
  document.body.dataset.readyAt = String(performance.now());
  setTimeout(more, 0);
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
}

// An answer: the HTML agentx rendered from its Markdown (every text in it
// escaped there, links only to http(s)), or its text as is.
function answerBody(html, text) {
  const body = el("div", { class: "text md" });
  if (typeof html === "string" && html) body.innerHTML = html;
  else body.textContent = text || "";
  return body;
}

function renderItem(item, ctx) {
  const type = item.type;
  if (type === "user") {
    const diff = el("a", { href: hashFor("diff", { id: ctx.id, message: item.message, folder: ctx.folder, agent: ctx.agent }),
      class: "diff-link", text: "what it changed" });
    return el("article", { class: "msg user", "data-index": item.index },
      el("div", { class: "who" }, el("strong", { text: "You" }), el("span", { text: "turn " + item.turn }), diff),
      el("div", { class: "text", text: item.text || "" }));
  }
  if (type === "assistant") {
    return el("article", { class: "msg assistant", "data-index": item.index },
      el("div", { class: "who" }, el("strong", { text: "Assistant" })),
      answerBody(item.html, item.text));
  }
  if (type === "compaction") {
    // Where the model's view was replaced by a summary; the transcript
    // keeps all that came before.
    return el("div", { class: "compaction", role: "separator", "data-index": item.index },
      el("p", { class: "line", text: item.line || "— compacted —" }),
      item.note ? el("p", { class: "note", text: item.note }) : null,
      item.summary ? el("details", {}, el("summary", { text: "The summary the model went on from" }),
        el("div", { class: "text", text: item.summary })) : null);
  }
  if (type === "function_call") {
    let shown = item.arguments || "";
    try { const a = JSON.parse(shown); if (a && typeof a.command === "string") shown = a.command; } catch (_) { /* as is */ }
    const details = el("details", { class: "tool", "data-index": item.index },
      el("summary", {}, "tool " + (item.name || "") + ": ", el("code", { text: shown.split("\n")[0].slice(0, 120) })),
      el("pre", { text: item.arguments || "" }));
    ctx.calls.set(item.call_id, details);
    return details;
  }
  if (type === "function_output") {
    const out = el("div", { class: "output" }, el("div", { class: "meta", text: "output" }), el("pre", { text: item.output || "" }));
    const call = ctx.calls.get(item.call_id);
    if (call) { call.append(out); return null; }
    return el("details", { class: "tool", "data-index": item.index }, el("summary", { text: "tool output" }), out);
  }
  // A kind this page does not know (e.g. a compaction record): shown as is.
  const rest = Object.assign({}, item);
  delete rest.index;
  const summary = typeof item.summary === "string" ? item.summary.split("\n")[0].slice(0, 120) : "";
  return el("details", { class: "unknown", "data-type": String(type), "data-index": item.index },
    el("summary", {}, el("strong", { text: String(type || "item") }), summary ? " — " + summary : ""),
    el("pre", { text: JSON.stringify(rest, null, 2) }));
}

async function conversationView(params) {
  const started = performance.now();
  const data = await api("transcript", { id: params.id, page: params.page, folder: params.folder, agent: params.agent });
  const ctx = { id: data.id, folder: data.folder, agent: data.agent, calls: new Map() };
  const marks = new Map(data.checkpoints.map((c) => [c.after_item, c]));
  const frag = document.createDocumentFragment();
  for (const item of data.items) {
    const node = renderItem(item, ctx);
    if (node) frag.append(node);
    const mark = marks.get(item.index);
    if (mark) frag.append(checkpointBar(data, mark));
  }
  const pageLink = (page, label) => el("a", { href: hashFor("c", { id: data.id, folder: data.folder, agent: data.agent, page }), text: label });
  const pager = el("nav", { class: "pager", "aria-label": "Pages" },
    data.page > 0 ? pageLink(0, "« first") : null,
    data.page > 0 ? pageLink(data.page - 1, "‹ older") : null,
    el("span", { class: "meta", text: "page " + (data.page + 1) + " of " + data.pages + " · " + data.total_items + " items" }),
    data.page < data.pages - 1 ? pageLink(data.page + 1, "newer ›") : null,
    data.page < data.pages - 1 ? pageLink(data.pages - 1, "last »") : null);
  const actions = el("div", { class: "bar" },
    el("button", { type: "button", id: "undo", text: "Undo last message…", onclick: () => undoPanel(data, actions) }));
  const transcript = el("section", { id: "transcript", "aria-label": "Transcript" }, frag);
  show(
    el("h1", { text: data.title || "(untitled)" }),
    el("p", { class: "meta" }, where(data.folder, data.agent) + " · " + data.turns + " turn(s) · " + data.checkpoint_count + " checkpoint(s) · " + data.id,
      data.forked_from ? el("span", {}, " · forked from ", el("a", { href: hashFor("c", { id: data.forked_from.id, folder: data.folder, agent: data.agent }), text: data.forked_from.id.slice(0, 8) }), " at turn " + data.forked_from.turn) : null),
    actions,
    pager,
    transcript,
    ...composer(data, data.pages > 1 ? pager.cloneNode(true) : null),
  );
  document.body.dataset.ready = "conversation";
  document.body.dataset.readyAt = String(performance.now());
  document.body.dataset.renderMs = String(Math.round(performance.now() - started));
}

function checkpointBar(data, mark) {
  const bar = el("div", { class: "checkpoint", "data-checkpoint": mark.index },
    el("span", {}, "checkpoint " + mark.index + (mark.index === 1 ? " (newest)" : "") + " · ", timeEl(mark.created_ms)));
  const fork = el("button", { type: "button", text: "Fork from here", onclick: async () => {
    try {
      const s = await post("fork", { id: data.id, checkpoint: mark.index, folder: data.folder, agent: data.agent });
      location.hash = hashFor("c", { id: s.id, folder: s.folder, agent: s.agent });
    } catch (err) { bar.append(el("span", { class: "error", role: "alert", text: err.message })); }
  } });
  const back = el("button", { type: "button", text: "Roll back to here…", onclick: () => {
    const yes = el("button", { type: "button", class: "primary", text: "Confirm rollback", onclick: async () => {
      try {
        await post("rollback", { id: data.id, checkpoint_id: mark.id, head: data.head, folder: data.folder, agent: data.agent });
        route();
      } catch (err) { bar.append(el("span", { class: "error", role: "alert", text: err.message })); }
    } });
    bar.append(el("span", { text: "Forget the turns after this checkpoint (files are not touched)?" }), yes);
    yes.focus();
  } });
  bar.append(fork, back);
  return bar;
}

// ---- continuing a conversation ------------------------------------------

// The turn sent from here (shown after the transcript), the lower pager
// and the form, which stays at the bottom of the window on long pages.
function composer(data, lowerPager) {
  const box = el("textarea", { id: "message", "aria-label": "Message", placeholder: "Message (Ctrl-Enter sends)" });
  const send = el("button", { type: "submit", class: "primary", id: "send", text: "Send" });
  const stop = el("button", { type: "button", id: "stop", text: "Stop", disabled: true });
  const live = el("section", { id: "live", "aria-live": "polite" });
  const form = el("form", { id: "composer", onsubmit: (e) => { e.preventDefault(); runTurn(data, box, send, stop, live); } },
    box, el("div", { class: "bar" }, send, stop,
      el("span", { class: "meta", text: info.can_send ? "tool calls: " + info.approval : info.cannot_send || "" })));
  box.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) form.requestSubmit(); });
  if (!info.can_send) send.disabled = true;
  form.setAttribute("aria-label", "Continue the conversation");
  return [live, lowerPager, form];
}

async function runTurn(data, box, send, stop, live) {
  const message = box.value;
  if (!message.trim()) return;
  send.disabled = true;
  const ask = el("article", { class: "msg user" }, el("div", { class: "who" }, el("strong", { text: "You" })), el("div", { class: "text", text: message }));
  const said = el("div", { class: "text md", id: "answer" });
  const events = el("div", { class: "events" });
  const reply = el("article", { class: "msg assistant live" }, el("div", { class: "who" }, el("strong", { text: "Assistant" }), el("span", { id: "turn-state", text: "thinking…" })), events, said);
  live.replaceChildren(ask, reply);
  let turn = null;
  let chunks = "";
  const state = (t) => { reply.querySelector("#turn-state").textContent = t; };
  stop.onclick = () => { if (turn) post("turn/stop", { turn }).catch(() => {}); state("stopping…"); };
  const handle = (name, d) => {
    if (name === "turn") { turn = d.turn; stop.disabled = false; }
    else if (name === "text") { said.append(d.text); reply.dataset.deltas = String(Number(reply.dataset.deltas || 0) + 1); }
    else if (name === "chunk") chunks += d.text;
    else if (name === "tool_call") {
      let shown = d.arguments;
      try { const a = JSON.parse(d.arguments); if (a && typeof a.command === "string") shown = a.command; } catch (_) { /* as is */ }
      events.append(el("details", { class: "tool", "data-call": d.call_id }, el("summary", {}, "tool " + d.name + ": ", el("code", { text: shown })), el("pre", { class: "out" })));
    } else if (name === "tool_output") {
      const out = events.querySelector('[data-call="' + CSS.escape(d.call_id) + '"] pre.out');
      if (out) out.append(d.text);
    } else if (name === "tool_result") {
      const call = events.querySelector('[data-call="' + CSS.escape(d.call_id) + '"]');
      const how = d.not_run ? "not run: " + d.not_run : d.denied ? "declined" : d.timed_out ? "timed out" : d.exit_code === null || d.exit_code === undefined ? "killed" : "exit " + d.exit_code;
      if (call) { call.querySelector("pre.out").textContent = d.output; call.querySelector("summary").append(" — " + how); }
    } else if (name === "approval") {
      const panel = el("div", { class: "panel approval", role: "alertdialog", "aria-label": "Approve tool call" },
        el("p", {}, "Run this command? ", el("code", { text: d.command })));
      const decide = (decision) => async () => {
        panel.querySelectorAll("button").forEach((b) => { b.disabled = true; });
        try { await post("turn/approve", { turn, call_id: d.call_id, decision }); panel.append(el("span", { class: "meta", text: " " + decision })); }
        catch (err) { panel.append(el("span", { class: "error", text: err.message })); }
      };
      const yes = el("button", { type: "button", class: "primary", id: "approve", text: "Run it", onclick: decide("yes") });
      panel.append(yes, el("button", { type: "button", id: "deny", text: "Don't run", onclick: decide("no") }),
        el("button", { type: "button", text: "Always", onclick: decide("always") }));
      events.append(panel);
      yes.focus();
    } else if (name === "notice") events.append(el("p", { class: "note", text: d.text }));
    else if (name === "error") {
      state("failed");
      events.append(el("p", { class: "error", role: "alert", text: d.error }));
      reply.dataset.finished = "error";
    } else if (name === "finished") {
      if (d.html) said.innerHTML = d.html;
      else if (d.text_in_chunks) said.textContent = chunks;
      else if (d.text && !said.textContent) said.textContent = d.text;
      state(d.status === "completed" ? "done" : d.status + (d.error ? ": " + d.error : ""));
      reply.dataset.finished = d.status;
    }
  };
  try {
    const res = await fetch("/api/turn", { method: "POST", headers: withKey({ "Content-Type": "application/json" }),
      body: JSON.stringify({ id: data.id, message, folder: data.folder, agent: data.agent }) });
    if (!res.ok) await answer(res);
    box.value = "";
    const reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let name = "message";
        const lines = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) name = line.slice(6).trim();
          else if (line.startsWith("data:")) lines.push(line.slice(5).replace(/^ /, ""));
        }
        if (lines.length) handle(name, JSON.parse(lines.join("\n")));
      }
    }
  } catch (err) {
    events.append(el("p", { class: "error", role: "alert", text: err.message }));
    reply.dataset.finished = "error";
  } finally {
    // Whatever happened, "thinking…" does not stay.
    if (!reply.dataset.finished) {
      events.append(el("p", { class: "error", role: "alert", text: "the turn ended without a result" }));
      reply.dataset.finished = "error";
    }
    if (reply.dataset.finished === "error") state("failed");
    send.disabled = false;
    stop.disabled = true;
    document.body.dataset.turn = reply.dataset.finished || "ended";
  }
}


// ---- undo and rewind: the plan, then a confirmation ----------------------

function planPanel(plan, what, confirm) {
  const conflicts = plan.changes.filter((c) => c.conflict).length;
  const force = el("input", { type: "checkbox", id: "force" });
  const panel = el("div", { class: "panel", id: "plan", role: "region", "aria-label": what },
    el("p", {}, el("strong", { text: what }), plan.message ? " — " + plan.message : ""),
    plan.passed && plan.passed.length ? el("p", { class: "note", text: "passed over (changed nothing): " + plan.passed.join(", ") }) : null,
    plan.changes.length ? el("ul", {}, plan.changes.map((c) => el("li", { class: c.conflict ? "conflict" : "" },
      c.kind + " " + c.path + (c.conflict ? " — changed since; left alone unless forced" : "")))) : el("p", { text: "Nothing to change." }),
    plan.left_alone.length ? el("details", {}, el("summary", { text: plan.left_alone.length + " path(s) left alone" }),
      el("ul", {}, plan.left_alone.map((c) => el("li", { text: c.path + ": " + c.reason })))) : null,
    conflicts ? el("label", {}, force, " also overwrite the " + conflicts + " conflicting path(s)") : null);
  const yes = el("button", { type: "button", class: "primary", id: "confirm", text: "Confirm", onclick: async () => {
    yes.disabled = true;
    try {
      const r = await confirm(force.checked);
      panel.replaceChildren(el("p", { id: "restored", role: "status" },
        "Done: " + r.applied.length + " path(s) restored" + (r.skipped.length ? ", " + r.skipped.length + " conflicting left alone" : "") +
        (r.errors.length ? "; errors: " + r.errors.join("; ") : "") + "."));
    } catch (err) { panel.append(el("p", { class: "error", role: "alert", text: err.message })); yes.disabled = false; }
  } });
  const no = el("button", { type: "button", text: "Cancel", onclick: () => panel.remove() });
  panel.append(el("div", { class: "bar" }, yes, no));
  return panel;
}

async function undoPanel(data, holder) {
  const old = document.getElementById("plan");
  if (old) old.remove();
  const target = { undo: data.id, folder: data.folder, agent: data.agent };
  try {
    const plan = await post("restore/plan", target);
    const panel = planPanel(plan, "Undo the last message's file changes", (force) => post("restore", Object.assign({ force }, target)));
    holder.after(panel);
    panel.querySelector("#confirm").focus();
  } catch (err) { holder.after(el("p", { id: "plan", class: "error", role: "alert", text: err.message })); }
}

// ---- snapshots and diffs -------------------------------------------------

async function snapshotsView(params) {
  const data = await api("snapshots", { folder: params.folder, agent: params.agent });
  const rows = data.snapshots.map((s) => {
    const rewind = el("button", { type: "button", text: "Rewind to this…", onclick: async () => {
      const old = document.getElementById("plan");
      if (old) old.remove();
      const target = { rewind: s.id, folder: data.folder, agent: params.agent };
      try {
        const plan = await post("restore/plan", target);
        const panel = planPanel(plan, "Rewind the folder to snapshot " + s.index, (force) => post("restore", Object.assign({ force }, target)));
        row.after(el("tr", {}, el("td", { colspan: 5 }, panel)));
        panel.querySelector("#confirm").focus();
      } catch (err) { fail(err); }
    } });
    const row = el("tr", {},
      el("td", { text: String(s.index) }),
      el("td", {}, timeEl(s.created_ms)),
      el("td", { text: s.phase + (s.label ? " — " + s.label : "") }),
      el("td", { text: s.files + " files, " + s.changed_files + " changed" }),
      el("td", {}, el("a", { href: hashFor("diff", { since: s.id, folder: data.folder, agent: params.agent }), text: "diff to now" }), " ", rewind));
    return row;
  });
  show(
    el("h1", { text: "Snapshots" }),
    el("p", { class: "meta", text: data.folder + " · " + data.snapshots.length + " snapshot(s), newest first" }),
    el("table", {}, el("thead", {}, el("tr", {}, ["#", "when", "why", "files", ""].map((h) => el("th", { text: h })))), el("tbody", {}, rows)),
  );
  document.body.dataset.ready = "snapshots";
}

async function diffView(params) {
  const data = await api("diff", params);
  const files = data.files.map((f) => {
    const pre = el("pre", { class: "diff" });
    for (const line of (f.unified || "").split("\n")) {
      const cls = line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : line.startsWith("@@") ? "hunk" : "";
      pre.append(el("span", { class: cls, text: line + "\n" }));
    }
    const note = f.binary ? " (binary)" : f.too_big ? " (too big to diff)" : "";
    return el("details", { open: true, class: "file", "data-path": f.path },
      el("summary", {}, el("code", { text: f.path }), " " + f.change + " ", el("span", { class: "add", text: "+" + f.added }), " ", el("span", { class: "del", text: "-" + f.removed }), note),
      pre);
  });
  const back = params.id ? el("a", { href: hashFor("c", { id: params.id, folder: params.folder, agent: params.agent }), text: "back to the conversation" }) : el("a", { href: hashFor("snapshots", { folder: params.folder }), text: "back to snapshots" });
  show(
    el("h1", { text: params.id ? "What message " + (params.message || 1) + " (from the end) changed" : "Changes since a snapshot" }),
    el("p", { class: "meta" }, data.from + " → " + data.to + " · " + data.files.length + " file(s) · ", back),
    data.files.length ? el("div", { id: "diff" }, files) : el("p", { id: "diff", text: "No file changed." }),
  );
  document.body.dataset.ready = "diff";
}

// ---- search -------------------------------------------------------------

function highlighted(snippet, ranges) {
  // Ranges are byte offsets into the UTF-8 snippet.
  const bytes = new TextEncoder().encode(snippet);
  const dec = new TextDecoder();
  const out = [];
  let at = 0;
  for (const [start, end] of ranges) {
    if (start < at || end > bytes.length) continue;
    out.push(dec.decode(bytes.slice(at, start)));
    out.push(el("mark", { text: dec.decode(bytes.slice(start, end)) }));
    at = end;
  }
  out.push(dec.decode(bytes.slice(at)));
  return out;
}

async function searchView(params) {
  const box = el("input", { type: "search", name: "q", value: params.q || "", "aria-label": "Search conversations", placeholder: "Search messages, tool output, titles" });
  const all = el("input", { type: "checkbox", id: "all", checked: params.all === "1" });
  const form = el("form", { class: "bar", role: "search", onsubmit: (e) => {
    e.preventDefault();
    location.hash = hashFor("search", { q: box.value, all: all.checked ? "1" : "" });
  } }, box, el("label", {}, all, " every folder"), el("button", { type: "submit", text: "Search" }));
  const results = el("ol", { id: "results" });
  show(el("h1", { text: "Search" }), form, results);
  box.focus();
  if (!params.q) return;
  const data = await api("search", { q: params.q, all: params.all === "1" ? "true" : "" });
  if (!data.hits.length) results.replaceWith(el("p", { id: "results", text: "No match." + (data.indexing ? " (the index is still catching up)" : "") }));
  for (const h of data.hits) {
    results.append(el("li", { class: "hit" },
      el("a", { href: hashFor("c", { id: h.session_id, folder: h.folder, agent: h.agent }), text: h.title || "(untitled)" }),
      el("span", { class: "meta" }, " · " + h.folder + (h.turn ? " · turn " + h.turn : " · title") + " · ", timeEl(h.at_ms), h.where === "remote" ? " · remote" : ""),
      el("div", { class: "text" }, highlighted(h.snippet, h.highlights))));
  }
  document.body.dataset.ready = "search";
}
