/// The browser chat page served at `/`: plain HTML, CSS and JavaScript, no build step, no CDN,
/// compiled into the server binary so it works offline.
enum ChatPage {
    static let html = #"""
<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Circle</title>
<style>
:root { --bg:#f6f7f9; --panel:#fff; --ink:#1d2330; --muted:#6b7385; --accent:#3b6cf6; --line:#e3e6ec; --warn:#b45309; --bad:#b91c1c; --ok:#15803d; }
* { box-sizing: border-box; }
html, body { height: 100%; margin: 0; }
body { font: 15px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--ink); background: var(--bg); display: flex; flex-direction: column; }
header { display: flex; align-items: center; gap: 12px; padding: 8px 14px; background: var(--panel); border-bottom: 1px solid var(--line); }
header h1 { font-size: 18px; margin: 0; }
#conn { font-size: 13px; padding: 2px 8px; border-radius: 10px; background: var(--line); color: var(--muted); }
#conn.connected { background: #dcfce7; color: var(--ok); }
#conn.reconnecting, #conn.connecting { background: #fef3c7; color: var(--warn); }
#conn.offline { background: #fee2e2; color: var(--bad); }
#me { margin-left: auto; color: var(--muted); font-size: 14px; }
button { font: inherit; padding: 6px 12px; border: 1px solid var(--line); border-radius: 6px; background: var(--panel); cursor: pointer; }
button.primary { background: var(--accent); color: #fff; border-color: var(--accent); }
input, textarea { font: inherit; padding: 7px 9px; border: 1px solid var(--line); border-radius: 6px; width: 100%; }
#signin { max-width: 420px; margin: 10vh auto; background: var(--panel); padding: 22px; border-radius: 10px; border: 1px solid var(--line); display: flex; flex-direction: column; gap: 10px; }
#app { flex: 1; display: flex; min-height: 0; }
#side { width: 230px; background: var(--panel); border-right: 1px solid var(--line); display: flex; flex-direction: column; }
#circles { list-style: none; margin: 0; padding: 6px; overflow-y: auto; flex: 1; }
#circles li { padding: 7px 10px; border-radius: 6px; cursor: pointer; display: flex; justify-content: space-between; }
#circles li.active { background: #e8eefe; font-weight: 600; }
#circles li small { color: var(--muted); }
#create { padding: 8px; border-top: 1px solid var(--line); display: flex; flex-direction: column; gap: 6px; }
#main { flex: 1; display: flex; flex-direction: column; min-width: 0; min-height: 0; }
#title { padding: 10px 14px; border-bottom: 1px solid var(--line); background: var(--panel); font-weight: 600; }
#messages { flex: 1; overflow-y: auto; padding: 10px 14px; min-height: 0; }
.post { margin: 6px 0; max-width: 75ch; }
.post .meta { color: var(--muted); font-size: 12px; }
.post .author { font-weight: 600; color: var(--ink); margin-right: 6px; }
.post.mine .author { color: var(--accent); }
.post .status { margin-left: 6px; font-size: 12px; }
.post.failed .status { color: var(--bad); }
.post img.photo { display: block; max-width: min(320px, 100%); max-height: 320px; margin: 4px 0; border-radius: 6px; border: 1px solid var(--line); }
#photo { position: absolute; opacity: 0; width: 1px; height: 1px; }
.system { color: var(--muted); font-size: 13px; margin: 4px 0; font-style: italic; }
#older { display: none; margin: 4px auto 10px; }
#typing { height: 20px; padding: 0 14px; color: var(--muted); font-size: 13px; }
#compose { display: flex; gap: 8px; padding: 10px 14px; border-top: 1px solid var(--line); background: var(--panel); }
.hidden { display: none !important; }
@media (max-width: 640px) {
  #app { flex-direction: column; }
  #side { width: auto; max-height: 34vh; border-right: none; border-bottom: 1px solid var(--line); }
  #create { flex-direction: row; }
}
</style>
</head>
<body>
<header>
  <h1>Circle</h1>
  <span id="conn" class="offline">offline</span>
  <span id="me"></span>
  <button id="signout" class="hidden">Sign out</button>
</header>
<form id="signin" class="hidden">
  <strong>Sign in</strong>
  <label id="devrow" class="hidden">Name (development server)<input id="devname" autocomplete="username" placeholder="alice"></label>
  <label>or an access token<textarea id="tokenin" rows="3" placeholder="eyJ…"></textarea></label>
  <button class="primary" type="submit">Sign in</button>
  <div id="signinerr" class="system"></div>
</form>
<div id="app" class="hidden">
  <aside id="side">
    <ul id="circles"></ul>
    <form id="create">
      <input id="newcircle" placeholder="new circle name" pattern="[a-z0-9._-]{1,64}">
      <label><input type="checkbox" id="newprivate" style="width:auto"> private</label>
      <button type="submit">Create</button>
    </form>
  </aside>
  <section id="main">
    <div id="title">Choose a circle</div>
    <div id="messages"><button id="older">Load older posts</button><div id="list"></div></div>
    <div id="typing"></div>
    <form id="compose">
      <input id="text" placeholder="Write a post" autocomplete="off" disabled>
      <input id="photo" type="file" accept="image/jpeg,image/png,image/gif,image/webp" disabled>
      <button type="button" id="attach" title="Post a photo (the text becomes its caption)" disabled>Photo</button>
      <button class="primary" type="submit" id="sendbtn" disabled>Post</button>
    </form>
  </section>
</div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const S = {
  token: sessionStorage.getItem("circle.token"), user: null, dev: false,
  ws: null, connected: false, attempt: 0, timer: null, heartbeat: null,
  current: null, circles: [], data: {},          // name -> {posts: Map(seq->post), last, oldest, more}
  outbox: [], requests: new Map(), counter: 0, typingTimers: {}, lastTypingSent: 0,
};
function uid() { return (crypto.randomUUID ? crypto.randomUUID() : Date.now() + "-" + Math.random().toString(16).slice(2)); }
function wsURL() { const p = location.protocol === "https:" ? "wss:" : "ws:"; return `${p}//${location.host}/v1/ws?token=${encodeURIComponent(S.token)}`; }
function claims(token) { try { return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))); } catch { return null; } }
function setConn(kind, text) { const c = $("conn"); c.className = kind; c.textContent = text; }
function api(path, options = {}) {
  return fetch(path, { ...options, headers: { "Authorization": "Bearer " + S.token, "Content-Type": "application/json", ...(options.headers || {}) } })
    .then(async (r) => { const body = await r.json().catch(() => ({})); if (!r.ok) throw new Error(body.error ? body.error.message : r.statusText); return body; });
}

// ---- sign in ----
async function showSignIn(message) {
  $("app").classList.add("hidden"); $("signout").classList.add("hidden"); $("signin").classList.remove("hidden");
  $("signinerr").textContent = message || "";
  try { const cfg = await fetch("/v1/config").then((r) => r.json()); S.dev = !!cfg.developmentTokens; } catch { S.dev = false; }
  $("devrow").classList.toggle("hidden", !S.dev);
}
$("signin").addEventListener("submit", async (e) => {
  e.preventDefault();
  let token = $("tokenin").value.trim();
  const name = $("devname").value.trim();
  if (!token && name && S.dev) {
    try { token = (await fetch("/v1/dev/token?user=" + encodeURIComponent(name)).then((r) => r.json())).token; } catch {}
  }
  if (!token || !claims(token)) { $("signinerr").textContent = "Give a valid token or a name."; return; }
  S.token = token; sessionStorage.setItem("circle.token", token); start();
});
$("signout").addEventListener("click", () => { sessionStorage.removeItem("circle.token"); S.token = null; if (S.ws) S.ws.close(1000); location.reload(); });

async function start() {
  const c = claims(S.token); S.user = c && c.sub;
  if (!S.user) return showSignIn();
  $("signin").classList.add("hidden"); $("app").classList.remove("hidden"); $("signout").classList.remove("hidden");
  $("me").textContent = S.user;
  await loadCircles();
  connect();
}
async function loadCircles() {
  try { S.circles = (await api("/v1/circles")).circles; renderCircles(); }
  catch (err) { if (/expired|token/i.test(err.message)) showSignIn(err.message); }
}
function renderCircles() {
  const ul = $("circles"); ul.innerHTML = "";
  for (const c of S.circles) {
    const li = document.createElement("li"); li.dataset.name = c.name;
    li.innerHTML = `<span></span><small>${c.private ? "private" : ""}</small>`; li.firstChild.textContent = "# " + c.name;
    if (c.name === S.current) li.classList.add("active");
    li.addEventListener("click", () => openCircle(c.name)); ul.appendChild(li);
  }
}
$("create").addEventListener("submit", async (e) => {
  e.preventDefault(); const name = $("newcircle").value.trim(); if (!name) return;
  try { await api("/v1/circles", { method: "POST", body: JSON.stringify({ name, private: $("newprivate").checked }) }); $("newcircle").value = ""; await loadCircles(); openCircle(name); }
  catch (err) { alert(err.message); }
});

// ---- connection: reconnect with full jitter, resume with since ----
function connect() {
  clearTimeout(S.timer);
  setConn(S.attempt ? "reconnecting" : "connecting", S.attempt ? "reconnecting…" : "connecting…");
  const ws = new WebSocket(wsURL(), "circle.v1"); S.ws = ws;
  ws.onopen = () => {
    S.connected = true; S.attempt = 0; setConn("connected", "connected");
    if (S.current) join(S.current);
    for (const p of S.outbox) if (p.status === "sending") sendPost(p);
    S.heartbeat = setInterval(() => request({ action: "ping" }).catch(() => {}), 25000);
  };
  ws.onmessage = (e) => onMessage(JSON.parse(e.data));
  ws.onclose = (e) => {
    if (S.ws !== ws) return;
    S.connected = false; clearInterval(S.heartbeat);
    for (const [, r] of S.requests) r.reject(new Error("disconnected")); S.requests.clear();
    if (e.code === 1000 && !S.token) return;
    if (e.code === 4001) { refreshToken(); return; }
    if (e.code === 1008 || e.code === 4004) { setConn("offline", "closed: " + e.reason); return; }
    S.attempt += 1;
    const delay = e.code === 1001 ? Math.random() * 250 : Math.random() * Math.min(30000, 500 * 2 ** (S.attempt - 1));
    const waiting = S.outbox.filter((p) => p.status !== "failed").length;
    setConn("reconnecting", `reconnecting in ${Math.ceil(delay / 1000)} s` + (waiting ? ` · ${waiting} waiting` : ""));
    S.timer = setTimeout(connect, delay);
  };
}
async function refreshToken() {
  if (S.dev && S.user) {
    try { S.token = (await fetch("/v1/dev/token?user=" + encodeURIComponent(S.user)).then((r) => r.json())).token; sessionStorage.setItem("circle.token", S.token); connect(); return; } catch {}
  }
  showSignIn("Your token expired. Sign in again.");
}
document.addEventListener("visibilitychange", () => { if (!document.hidden && !S.connected && S.token) { S.attempt = 0; connect(); } });
window.addEventListener("online", () => { if (!S.connected && S.token) { S.attempt = 0; connect(); } });

function sendRaw(obj) { if (S.ws && S.ws.readyState === 1) S.ws.send(JSON.stringify(obj)); }
function request(obj) {
  obj.id = obj.id || "w" + (++S.counter);
  return new Promise((resolve, reject) => {
    if (!S.connected) return reject(new Error("offline"));
    S.requests.set(obj.id, { resolve, reject }); sendRaw(obj);
    setTimeout(() => { if (S.requests.delete(obj.id)) reject(new Error("timed out")); }, 10000);
  });
}
function circleData(name) { return S.data[name] || (S.data[name] = { posts: new Map(), last: null, oldest: null, more: true }); }

function onMessage(m) {
  switch (m.type) {
    case "ack": case "error": case "history": {
      const pending = S.outbox.find((p) => p.id === m.id);
      if (pending) { if (m.type === "ack") { pending.status = "sent"; pending.seq = m.seq; S.outbox = S.outbox.filter((p) => p !== pending); } else if (m.code !== "unavailable") { pending.status = "failed"; pending.reason = m.message; } renderCurrent(); }
      const r = S.requests.get(m.id); if (r) { S.requests.delete(m.id); m.type === "error" ? r.reject(new Error(m.message)) : r.resolve(m); }
      break;
    }
    case "post": {
      const d = circleData(m.circle);
      if (d.last !== null && m.seq <= d.last) break;          // replay overlap: already shown
      d.posts.set(m.seq, m); d.last = m.seq; if (d.oldest === null) d.oldest = m.seq;
      if (m.circle === S.current) appendPost(m);
      break;
    }
    case "typing": if (m.circle === S.current) showTyping(m.user); break;
    case "joined": case "left": if (m.circle === S.current && m.user !== S.user) system(`${m.user} ${m.type} the circle`); break;
    case "gap": if (m.circle === S.current) system(`posts ${m.from}–${m.to} are missing`); break;
  }
}

// ---- circles, history, posting ----
async function openCircle(name) {
  S.current = name; renderCircles();
  $("title").textContent = "# " + name; for (const id of ["text", "sendbtn", "attach", "photo"]) $(id).disabled = false;
  const d = circleData(name);
  renderCurrent();
  if (d.last === null) await loadOlder(true);
  if (S.connected) join(name);
  $("text").focus();
}
function join(name) {
  const d = circleData(name);
  const req = { action: "join", circle: name }; if (d.last !== null) req.since = d.last;
  request(req).then((ack) => { if (d.last === null) d.last = ack.seq; }).catch((err) => system("could not join: " + err.message));
}
async function loadOlder(initial) {
  const d = circleData(S.current); if (!d.more && !initial) return;
  const q = new URLSearchParams({ limit: "50" }); if (d.oldest !== null) q.set("before", d.oldest);
  try {
    const page = await api(`/v1/circles/${encodeURIComponent(S.current)}/messages?` + q);
    const list = $("messages"); const before = list.scrollHeight;
    for (const p of page.posts) d.posts.set(p.seq, p);
    if (page.posts.length) { d.oldest = page.posts[0].seq; if (d.last === null || page.posts[page.posts.length - 1].seq > d.last) d.last = page.posts[page.posts.length - 1].seq; }
    d.more = page.more; renderCurrent();
    list.scrollTop = initial ? list.scrollHeight : list.scrollHeight - before;
  } catch (err) { system("could not load history: " + err.message); }
}
$("older").addEventListener("click", () => loadOlder(false));
$("messages").addEventListener("scroll", () => { if ($("messages").scrollTop < 40 && S.current && circleData(S.current).more) loadOlder(false); });

function postNode(p, mine, status) {
  const div = document.createElement("div"); div.className = "post" + (mine ? " mine" : "") + (status === "failed" ? " failed" : "");
  const meta = document.createElement("div"); meta.className = "meta";
  const when = p.time ? new Date(p.time).toLocaleTimeString() : "";
  meta.innerHTML = `<span class="author"></span><span></span><span class="status"></span>`;
  meta.children[0].textContent = p.author || S.user; meta.children[1].textContent = when;
  meta.children[2].textContent = status === "sending" ? "sending…" : status === "failed" ? "not posted: " + (p.reason || "") : p.seq ? "#" + p.seq : "";
  meta.children[2].textContent = status === "uploading" ? "uploading photo…" : meta.children[2].textContent;
  const text = document.createElement("div"); text.textContent = p.text || "";
  div.append(meta);
  if (p.attachment) {
    // Media is fetched with the token in the query: an <img> cannot send an Authorization header.
    const img = document.createElement("img"); img.className = "photo"; img.loading = "lazy"; img.alt = "photo";
    img.src = `/v1/media/${encodeURIComponent(p.attachment)}?token=${encodeURIComponent(S.token)}`;
    div.append(img);
  }
  div.append(text); return div;
}
function renderCurrent() {
  const list = $("list"); list.innerHTML = "";
  if (!S.current) return;
  const d = circleData(S.current);
  $("older").style.display = d.more && d.posts.size ? "block" : "none";
  for (const seq of [...d.posts.keys()].sort((a, b) => a - b)) { const p = d.posts.get(seq); list.appendChild(postNode(p, p.author === S.user)); }
  for (const p of S.outbox) if (p.circle === S.current) list.appendChild(postNode(p, true, p.status));
}
function appendPost(p) {
  const box = $("messages"); const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 60;
  renderCurrent(); if (atBottom) box.scrollTop = box.scrollHeight;
}
function system(text) { const div = document.createElement("div"); div.className = "system"; div.textContent = text; $("list").appendChild(div); }
function showTyping(user) {
  clearTimeout(S.typingTimers[user]); S.typingTimers[user] = setTimeout(() => { delete S.typingTimers[user]; renderTyping(); }, 3000); renderTyping();
}
function renderTyping() { const users = Object.keys(S.typingTimers); $("typing").textContent = users.length ? users.join(", ") + (users.length > 1 ? " are" : " is") + " typing…" : ""; }
$("text").addEventListener("input", () => {
  if (!S.current || !S.connected || Date.now() - S.lastTypingSent < 2000) return;
  S.lastTypingSent = Date.now(); request({ action: "typing", circle: S.current }).catch(() => {});
});
$("compose").addEventListener("submit", (e) => {
  e.preventDefault(); const text = $("text").value.trim(); if (!text || !S.current) return;
  const post = { id: uid(), circle: S.current, text, author: S.user, status: "sending" };
  S.outbox.push(post); $("text").value = ""; renderCurrent(); $("messages").scrollTop = $("messages").scrollHeight;
  sendPost(post);   // offline: sent on reconnect
});
function sendPost(p) {
  const req = { action: "post", id: p.id, circle: p.circle }; if (p.text) req.text = p.text; if (p.attachment) req.attachment = p.attachment;
  sendRaw(req);
}
$("attach").addEventListener("click", () => $("photo").click());
$("photo").addEventListener("change", async () => {
  const file = $("photo").files[0]; $("photo").value = ""; if (!file || !S.current) return;
  const caption = $("text").value.trim(); $("text").value = "";
  const post = { id: uid(), circle: S.current, text: caption, author: S.user, status: "uploading" };
  S.outbox.push(post); renderCurrent(); $("messages").scrollTop = $("messages").scrollHeight;
  try {
    // Uploaded first (POST /v1/media streams it to the server), then posted with its media id.
    const media = await api("/v1/media", { method: "POST", headers: { "Content-Type": file.type || "application/octet-stream" }, body: file });
    post.attachment = media.id; post.status = "sending"; renderCurrent(); sendPost(post);
  } catch (err) { post.status = "failed"; post.reason = err.message; renderCurrent(); }
});

if (S.token) start(); else showSignIn();
</script>
</body>
</html>
"""#
}
