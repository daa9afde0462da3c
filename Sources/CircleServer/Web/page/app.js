// The Circle chat page: sign in, circles, a timeline per circle, posting text and photos over
// the circle.v1 WebSocket (docs/PROTOCOL.md) and the HTTP API (docs/API.md, docs/MEDIA.md).
// No framework and no build step; served as a package resource under a strict
// Content-Security-Policy, so nothing here uses inline handlers, inline styles or innerHTML.
"use strict";

const $ = (id) => document.getElementById(id);
const GROUP_GAP_MS = 5 * 60 * 1000;   // consecutive posts of one author within this share one header
const PAGE_SIZE = 50;
const MAX_NOTICES = 200;               // presence notices kept per circle
const PHOTO_BOX = { width: 360, height: 300 };
const PHONE = window.matchMedia("(max-width: 720px)");
const REACTIONS = ["👍", "❤️", "😂", "🎉", "😮", "😢", "🙏", "👀"];   // the picker's choice
const LONG_PRESS_MS = 500;
// Presence notices (docs/PAGE.md, "Presence notices"): a leave is said only once the person has
// stayed away for AWAY ms, and a join only when it is a return after being away, not a reconnect.
// The `circle.presence` key of sessionStorage ({"settle": ms, "away": ms}) overrides both.
const PRESENCE = { settle: 30000, away: 120000 };

/// Where the page was served, without the trailing slash: "" at the root, "/chat" when Circle is
/// mounted under /chat (docs/PAGE.md, "Served under a path"). Every URL the page asks for is
/// made by at(), so none leaves that path.
const ROOT = new URL(".", location.href).pathname.replace(/\/$/, "");

/// The URL of the server's path `path` ("/v1/circles", "/assets/sw.js") under ROOT.
function at(path) {
  return ROOT + path;
}

const S = {
  token: null,                // an access token (development or pasted), when not signed in by cookie
  csrf: null,                 // the session's X-Circle-CSRF value, when signed in with an account
  session: null,              // the id of the page's session
  keepToken: false,           // the token is a development one, kept in sessionStorage
  signInMode: "account",
  setupRequired: false,
  methods: [],                // how one signs in here (GET /v1/auth/state): "password", "passkey"
  setupMode: "password",      // the setup form's way: "passkey" or "password"
  signupMode: "password",     // the sign-up form's way, the same
  deviceCode: null,           // from a #device= link: the code of a device waiting for approval
  setupToken: null,           // from a #setup= link
  invite: null,               // from an #invite= link
  user: null,
  profile: null,              // {name, displayName, avatar, role}
  people: new Map(),          // name -> profile, from GET /v1/users
  dev: false,
  ws: null,
  connected: false,
  attempt: 0,
  timer: null,
  countdown: null,
  reconnectAt: 0,
  heartbeat: null,
  current: null,
  circles: [],
  joined: new Set(),          // circles opened this session: joined again on every connection
  data: new Map(),            // circle -> CircleData
  outbox: [],                 // own posts not yet stored: {id, circle, text, attachment, status, …}
  requests: new Map(),
  counter: 0,
  typing: new Map(),          // circle -> Map(user -> timer)
  lastTypingSent: 0,
  pinned: true,               // the timeline follows the newest post
  nodes: new Map(),           // author + "\n" + id -> rendered post element, reused across redraws
  extras: new Map(),          // day lines, notices, intros: reused the same way
  noticeCounter: 0,
  replyTo: null,              // {circle, seq}: the post the composer answers
  staged: null,               // {circle, file, url, size}: the photo chosen and not yet posted
  editing: null,              // {key, circle, seq, draft}: the post being edited in place
  confirming: null,           // key of the post asking "Delete this post?"
  menu: null,                 // key of the post whose actions a long press opened
  roving: null,               // {circle, seq}: the timeline's tab stop when not the newest post
  searches: 0,                // searches asked: an answer to an older one is dropped
  found: null,                // {circle, seq}: the search hit opened last
};

// ---------------------------------------------------------------- small helpers

function uid() {
  return crypto.randomUUID ? crypto.randomUUID() : Date.now().toString(36) + "-" + Math.random().toString(36).slice(2);
}

function claims(token) {
  try {
    const part = token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(part + "=".repeat((4 - part.length % 4) % 4)));
  } catch {
    return null;
  }
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/// The credential headers of a request: the token, or (signed in by cookie, which the browser
/// sends itself) the session's CSRF value on every request that changes something.
function authHeaders(method = "GET") {
  const headers = {};
  if (S.token) headers["Authorization"] = "Bearer " + S.token;
  else if (S.csrf && !["GET", "HEAD", "OPTIONS"].includes(method.toUpperCase())) headers["X-Circle-CSRF"] = S.csrf;
  return headers;
}

async function api(path, options = {}) {
  const response = await fetch(at(path), {
    ...options,
    headers: { ...authHeaders(options.method || "GET"), "Content-Type": "application/json", ...(options.headers || {}) },
  });
  if (response.status === 204) return {};
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = body.error || {};
    const failure = new APIError(response.status, error.code || "http_" + response.status, error.message || response.statusText || "the server answered " + response.status);
    // A session that ended (signed out elsewhere, expired, the account disabled): back to the
    // sign-in form, whatever the request was.
    if (S.csrf && S.user && (response.status === 401 || failure.code === "account_disabled")) {
      setTimeout(() => showSignIn(failure.code === "account_disabled" ? "This account is deactivated or banned." : "Your session ended. Sign in again."));
    }
    throw failure;
  }
  return body;
}

function mediaURL(id) {
  // An <img> cannot send an Authorization header, so media take a token as ?token= (docs/MEDIA.md);
  // signed in by cookie, the browser sends the cookie itself.
  const path = at(`/v1/media/${encodeURIComponent(id)}`);
  return S.token ? `${path}?token=${encodeURIComponent(S.token)}` : path;
}

/// Initials for an avatar: "alice" → "A", "bob.smith" → "BS", "carol-ann_lee" → "CA".
function initials(name) {
  const parts = String(name).split(/[._\-@\s]+/).filter(Boolean);
  if (!parts.length) return "?";
  const first = Array.from(parts[0])[0] || "?";
  const second = parts.length > 1 ? Array.from(parts[1])[0] || "" : "";
  return (first + second).toUpperCase();
}

/// One of eight avatar colours, the same for a name everywhere.
function hue(name) {
  let h = 0;
  for (const c of String(name)) h = (h * 31 + c.codePointAt(0)) >>> 0;
  return h % 8;
}

function avatar(name, className = "avatar") {
  const node = el("span", className + " c" + hue(name), initials(name));
  node.setAttribute("aria-hidden", "true");
  return node;
}

const timeFormat = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "full", timeStyle: "short" });

function timeNode(ms, className) {
  const t = el("time", className, timeFormat.format(ms));
  t.dateTime = new Date(ms).toISOString();
  t.title = fullFormat.format(ms);
  return t;
}

function dayKey(ms) {
  const d = new Date(ms);
  return d.getFullYear() * 10000 + (d.getMonth() + 1) * 100 + d.getDate();
}

function dayLabel(ms) {
  const today = new Date();
  const key = dayKey(ms);
  if (key === dayKey(today.getTime())) return "Today";
  const yesterday = new Date(today.getFullYear(), today.getMonth(), today.getDate() - 1);
  if (key === dayKey(yesterday.getTime())) return "Yesterday";
  const options = { weekday: "long", month: "long", day: "numeric" };
  if (new Date(ms).getFullYear() !== today.getFullYear()) options.year = "numeric";
  return new Intl.DateTimeFormat(undefined, options).format(ms);
}

// ---------------------------------------------------------------- photo sizes

// Photo dimensions by media id, remembered once an image has loaded (or before its upload), so
// that a timeline drawn again reserves the right space and does not jump while images load.
const photoSizes = (() => {
  try { return new Map(Object.entries(JSON.parse(sessionStorage.getItem("circle.photoSizes") || "{}"))); } catch { return new Map(); }
})();

function rememberPhotoSize(id, width, height) {
  if (!id || !width || !height) return;
  photoSizes.set(id, [width, height]);
  if (photoSizes.size > 2000) photoSizes.delete(photoSizes.keys().next().value);
  try { sessionStorage.setItem("circle.photoSizes", JSON.stringify(Object.fromEntries(photoSizes))); } catch { /* storage full: only a hint */ }
}

/// Sizes a photo's box to fit PHOTO_BOX at the photo's aspect ratio (never larger than the photo).
function sizePhotoBox(box, size) {
  if (!size) { box.classList.add("unsized"); return; }
  const [w, h] = size;
  const scale = Math.min(1, PHOTO_BOX.width / w, PHOTO_BOX.height / h);
  box.classList.remove("unsized");
  box.style.width = Math.max(1, Math.round(w * scale)) + "px";
  box.style.aspectRatio = `${w} / ${h}`;
}

// ---------------------------------------------------------------- sign in

// How the page is signed in: with the session cookie of an account (S.csrf set: sent back in
// X-Circle-CSRF on every change), or with an access token (S.token: a development token on a
// --dev server, kept in sessionStorage; a pasted token, kept in memory only).
async function loadConfig() {
  try {
    const config = await fetch(at("/v1/config")).then((r) => r.json());
    S.dev = !!config.developmentTokens;
  } catch {
    S.dev = false;
  }
  $("devrow").classList.toggle("hidden", !S.dev);
  $("tokenlabel").textContent = S.dev ? "or an access token" : "Access token";
  setSignInMode(S.dev ? "token" : "account");
}

/// The sign-in form shows either the account fields (name, password) or, as the other way in,
/// the token field (with the development name on a --dev server).
function setSignInMode(mode) {
  S.signInMode = mode;
  const account = mode === "account";
  $("accountrows").classList.toggle("hidden", !account);
  $("devrow").classList.toggle("hidden", account || !S.dev);
  $("tokenrow").classList.toggle("hidden", account);
  $("signinmode").textContent = account ? (S.dev ? "Use a development name or a token" : "Use an access token") : "Sign in with a password";
  showPasskeySignIn();
}

/// The passkey button goes with the account fields, once an account can exist to sign in to.
function showPasskeySignIn() {
  $("passkeysignin").classList.toggle("hidden", !passkeysAvailable() || S.signInMode !== "account" || S.setupRequired);
}
$("signinmode").addEventListener("click", () => {
  setSignInMode(S.signInMode === "account" ? "token" : "account");
  $("signinerr").textContent = "";
  focusSignIn();
});

function focusSignIn() {
  if (S.signInMode === "account") $(($("signinname").value ? "signinpass" : "signinname")).focus();
  else (S.dev ? $("devname") : $("tokenin")).focus();
}

function stopConnection() {
  clearTimeout(S.timer);
  clearInterval(S.countdown);
  clearInterval(S.heartbeat);
  S.timer = S.countdown = S.heartbeat = null;
  const ws = S.ws;
  S.ws = null;
  S.connected = false;
  if (ws) ws.close(1000);
}

/// Shows one of the three cards of the sign-in screen: "signinform", "setupform", "signupform".
function showCard(id) {
  for (const card of ["signinform", "setupform", "signupform"]) $(card).classList.toggle("hidden", card !== id);
  if (id === "setupform") setCredentialMode("setup", "passkey");
  if (id === "signupform") setCredentialMode("signup", "passkey");
  document.body.className = "signed-out";
  $("app").classList.add("hidden");
  $("signin").classList.remove("hidden");
}

function showSignIn(message) {
  stopConnection();
  closeSheet();
  closeAccountMenu();
  S.token = null;
  S.csrf = null;
  S.session = null;
  S.user = null;
  S.profile = null;
  S.people.clear();
  S.current = null;
  S.circles = [];
  S.joined.clear();
  S.data.clear();
  S.nodes.clear();
  S.extras.clear();
  S.outbox = [];
  S.editing = S.confirming = S.menu = null;
  setReply(null);
  unstagePhoto({ keepFocus: true });
  closePicker();
  $("list").replaceChildren();
  $("circles").replaceChildren();
  $("welcome").classList.remove("hidden");
  $("main").classList.add("no-circle");
  $("title").textContent = "Circle";
  $("subtitle").textContent = "";
  $("membersbtn").classList.add("hidden");
  $("typing").replaceChildren();
  for (const id of ["text", "sendbtn", "attach", "photo"]) $(id).disabled = true;
  sessionStorage.removeItem("circle.token");
  showCard("signinform");
  $("me").textContent = "";
  $("signinpass").value = "";
  $("signinerr").textContent = message || "";
  showPasskeySignIn();
  $("signinnote").classList.toggle("hidden", !S.setupRequired && !S.deviceCode);
  $("signinnote").textContent = S.setupRequired
    ? "No account exists yet: open the setup link that circle serve printed when it started."
    : S.deviceCode ? `Sign in to approve the device showing ${S.deviceCode}.` : "";
  focusSignIn();
}

async function devToken(name) {
  const response = await fetch(at("/v1/dev/token?user=" + encodeURIComponent(name)));
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error(body.error ? body.error.message : "the server answered " + response.status);
  return body.token;
}

/// A request of the sign-in screen (no credential yet): the parsed answer, or an APIError.
async function authPost(path, body) {
  const response = await fetch(at(path), { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  const answer = await response.json().catch(() => ({}));
  if (!response.ok) {
    const error = answer.error || {};
    const failure = new APIError(response.status, error.code || "http_" + response.status, error.message || "the server answered " + response.status);
    failure.retryAfter = Number(response.headers.get("Retry-After")) || 0;
    throw failure;
  }
  return answer;
}

function waitText(seconds) {
  if (seconds >= 120) return `${Math.ceil(seconds / 60)} minutes`;
  return `${seconds} ${seconds === 1 ? "second" : "seconds"}`;
}

$("signinform").addEventListener("submit", async (event) => {
  event.preventDefault();
  $("signinerr").textContent = "";
  if (S.signInMode === "account") return signInWithPassword();
  let token = $("tokenin").value.trim();
  const name = $("devname").value.trim();
  let development = false;
  if (!token && name && S.dev) {
    try {
      token = await devToken(name);
      development = true;
    } catch (error) {
      $("signinerr").textContent = error.message;
      return;
    }
  }
  if (!token) {
    $("signinerr").textContent = S.dev ? "Type a name, or paste an access token." : "Paste an access token.";
    return;
  }
  if (!claims(token) || !claims(token).sub) {
    $("signinerr").textContent = "That is not an access token (a JWT: three parts separated by dots).";
    return;
  }
  $("signinbtn").disabled = true;
  try {
    await signIn(token, { keep: development || S.dev });
  } finally {
    $("signinbtn").disabled = false;
  }
});

// ---- passkeys (WebAuthn; docs/API.md, "Passkeys")

/// Whether this server (it knows its public URL) and this browser both do passkeys.
function passkeysAvailable() {
  return S.methods.includes("passkey") && !!window.PublicKeyCredential && !!navigator.credentials;
}

function fromBase64url(text) {
  const binary = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0)).buffer;
}

function toBase64url(buffer) {
  let binary = "";
  for (const byte of new Uint8Array(buffer)) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/// The server's options (WebAuthn L3 JSON form) as the browser takes them: with
/// parse*FromJSON where the browser has it, else by decoding the base64url fields here.
function creationOptions(json) {
  if (PublicKeyCredential.parseCreationOptionsFromJSON) return PublicKeyCredential.parseCreationOptionsFromJSON(json);
  return {
    ...json,
    challenge: fromBase64url(json.challenge),
    user: { ...json.user, id: fromBase64url(json.user.id) },
    excludeCredentials: (json.excludeCredentials || []).map((c) => ({ ...c, id: fromBase64url(c.id) })),
  };
}

function requestOptions(json) {
  if (PublicKeyCredential.parseRequestOptionsFromJSON) return PublicKeyCredential.parseRequestOptionsFromJSON(json);
  return {
    ...json,
    challenge: fromBase64url(json.challenge),
    allowCredentials: (json.allowCredentials || []).map((c) => ({ ...c, id: fromBase64url(c.id) })),
  };
}

/// A credential as the server reads it: credential.toJSON(), or the same built here.
function credentialJSON(credential) {
  if (typeof credential.toJSON === "function") return credential.toJSON();
  const response = { clientDataJSON: toBase64url(credential.response.clientDataJSON) };
  if (credential.response.attestationObject) response.attestationObject = toBase64url(credential.response.attestationObject);
  if (credential.response.authenticatorData) {
    response.authenticatorData = toBase64url(credential.response.authenticatorData);
    response.signature = toBase64url(credential.response.signature);
    if (credential.response.userHandle) response.userHandle = toBase64url(credential.response.userHandle);
  }
  return { id: credential.id, rawId: toBase64url(credential.rawId), type: credential.type, response, clientExtensionResults: {} };
}

/// What to say when the browser's passkey dialog fails (an APIError keeps the server's words).
function passkeyMessage(error) {
  if (error instanceof APIError) return error.message;
  if (error && error.name === "NotAllowedError") return "No passkey was used: the browser's dialog was closed or timed out. Try again when you are ready.";
  if (error && error.name === "InvalidStateError") return "This device already keeps a passkey for this account.";
  if (error && error.name === "SecurityError") return "This browser refused passkeys for this address: " + error.message;
  return "The passkey did not work: " + ((error && error.message) || error);
}

/// Registers a passkey: the options (`start`, sent with `post`), the browser's dialog, then the
/// credential. The server's answer: the auth state (sign-up, setup) or the passkey (one's own).
async function registerPasskey(post, start, name) {
  const options = await post("/v1/auth/passkeys/register/options", start);
  const credential = await navigator.credentials.create({ publicKey: creationOptions(options.publicKey) });
  const body = { challengeId: options.challengeId, credential: credentialJSON(credential) };
  if (name) body.name = name;
  return post("/v1/auth/passkeys/register", body);
}

const signedInPost = (path, body) => api(path, { method: "POST", body: JSON.stringify(body) });

$("passkeysignin").addEventListener("click", async () => {
  $("signinerr").textContent = "";
  $("passkeysignin").disabled = true;
  try {
    const options = await authPost("/v1/auth/passkeys/signin/options", {});
    const credential = await navigator.credentials.get({ publicKey: requestOptions(options.publicKey) });
    const state = await authPost("/v1/auth/passkeys/signin", { challengeId: options.challengeId, credential: credentialJSON(credential) });
    enterWithSession(state);
  } catch (error) {
    $("signinerr").textContent = passkeyMessage(error);
  } finally {
    $("passkeysignin").disabled = false;
  }
});

/// The setup and sign-up forms: a passkey is the first way where it works, a password the other.
function setCredentialMode(form, mode) {
  if (!passkeysAvailable()) mode = "password";
  S[form + "Mode"] = mode;
  const passkey = mode === "passkey";
  $(form + "passrows").classList.toggle("hidden", passkey);
  $(form + "mode").classList.toggle("hidden", !passkeysAvailable());
  $(form + "mode").textContent = passkey ? "Use a password instead" : "Use a passkey instead";
  $(form + "btn").textContent = passkey ? "Use a passkey" : (form === "setup" ? "Create the account" : "Create my account");
}
for (const form of ["setup", "signup"]) {
  $(form + "mode").addEventListener("click", () => {
    setCredentialMode(form, S[form + "Mode"] === "passkey" ? "password" : "passkey");
    $(form + "err").textContent = "";
    $(S[form + "Mode"] === "passkey" ? form + "name" : form + "pass").focus();
  });
}

async function signInWithPassword() {
  const name = $("signinname").value.trim();
  const password = $("signinpass").value;
  if (!name || !password) {
    $("signinerr").textContent = "Type your name and your password.";
    $(name ? "signinpass" : "signinname").focus();
    return;
  }
  $("signinbtn").disabled = true;
  try {
    const state = await authPost("/v1/auth/signin", { name, password });
    $("signinpass").value = "";
    enterWithSession(state);
  } catch (error) {
    let message = error.message;
    if (error.code === "rate_limited") {
      message = `Too many attempts. Try again in ${waitText(error.retryAfter || 60)}.`;
    }
    $("signinerr").textContent = message;
    $("signinpass").select();
    $("signinpass").focus();
  } finally {
    $("signinbtn").disabled = false;
  }
}

/// Checks a new password's two copies; the message to show, or "".
function passwordMismatch(first, second) {
  if (!first) return "Choose a password.";
  if (first !== second) return "The two passwords are not the same.";
  return "";
}

$("setupform").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = $("setuperr");
  error.textContent = "";
  const name = $("setupname").value.trim();
  if (!name) { error.textContent = "Choose a name."; $("setupname").focus(); return; }
  if (S.setupMode === "passkey") {
    $("setupbtn").disabled = true;
    try {
      const start = { setup: S.setupToken, name };
      if ($("setupdisplay").value.trim()) start.displayName = $("setupdisplay").value.trim();
      const state = await registerPasskey(authPost, start);
      S.setupToken = null;
      enterWithSession(state);
    } catch (failure) {
      error.textContent = passkeyMessage(failure);
    } finally {
      $("setupbtn").disabled = false;
    }
    return;
  }
  const mismatch = passwordMismatch($("setuppass").value, $("setuppass2").value);
  if (mismatch) { error.textContent = mismatch; $("setuppass").focus(); return; }
  $("setupbtn").disabled = true;
  try {
    const body = { token: S.setupToken, name, password: $("setuppass").value };
    if ($("setupdisplay").value.trim()) body.displayName = $("setupdisplay").value.trim();
    const state = await authPost("/v1/auth/setup", body);
    S.setupToken = null;
    for (const id of ["setuppass", "setuppass2"]) $(id).value = "";
    enterWithSession(state);
  } catch (failure) {
    error.textContent = failure.message;
  } finally {
    $("setupbtn").disabled = false;
  }
});

/// An invite link: says what it joins, then offers the sign-up form.
async function showInvite(invite) {
  S.invite = invite;
  showCard("signupform");
  $("signupfields").classList.add("hidden");
  $("signuperr").textContent = "";
  $("signupoffer").textContent = "Checking the invite…";
  try {
    const offer = await authPost("/v1/auth/invite", { invite });
    const circles = offer.circles.length ? " It adds you to " + offer.circles.map((c) => "#" + c).join(", ") + "." : "";
    $("signupoffer").textContent = `You are invited to this Circle server.${circles} The invite works until ${fullFormat.format(offer.expiresAt)}.`;
    $("signupfields").classList.remove("hidden");
    $("signupname").focus();
  } catch (error) {
    $("signupoffer").textContent = "";
    $("signuperr").textContent = error.code === "invite_invalid" ? "This invite link does not work: " + error.message : error.message;
    $("signupback").focus();
  }
}

$("signupform").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = $("signuperr");
  error.textContent = "";
  const name = $("signupname").value.trim();
  if (!name) { error.textContent = "Choose a name."; $("signupname").focus(); return; }
  const passkey = S.signupMode === "passkey";
  const mismatch = passkey ? "" : passwordMismatch($("signuppass").value, $("signuppass2").value);
  if (mismatch) { error.textContent = mismatch; $("signuppass").focus(); return; }
  $("signupbtn").disabled = true;
  try {
    const body = passkey ? { invite: S.invite, name } : { invite: S.invite, name, password: $("signuppass").value };
    if ($("signupdisplay").value.trim()) body.displayName = $("signupdisplay").value.trim();
    const state = passkey ? await registerPasskey(authPost, body) : await authPost("/v1/auth/signup", body);
    S.invite = null;
    for (const id of ["signuppass", "signuppass2"]) $(id).value = "";
    enterWithSession(state);
  } catch (failure) {
    error.textContent = failure.code === "conflict" && failure.message.includes("taken") ? `The name “${name}” is taken: choose another.` : passkeyMessage(failure);
    if (failure.code === "conflict") $("signupname").focus();
  } finally {
    $("signupbtn").disabled = false;
  }
});
$("signupback").addEventListener("click", () => { S.invite = null; showSignIn(""); });

/// Signed in with an account (the cookie is set): the state answer has the profile and the
/// CSRF token.
async function enterWithSession(state) {
  S.token = null;
  S.csrf = state.csrf;
  S.session = state.session;
  S.setupRequired = false;
  sessionStorage.removeItem("circle.token");
  let list = null;
  try {
    list = await api("/v1/circles");
  } catch (error) {
    if (error instanceof APIError && (error.status === 401 || error.status === 403)) return showSignIn(error.message);
  }
  enterApp(state.user, list);
}

/// Checks the token with the server before showing anything: a token the server refuses never
/// gets as far as the chat (no user name shown, no connection attempts). `keep`: remember it in
/// the tab's sessionStorage (development tokens only).
async function signIn(token, { keep = false } = {}) {
  const c = claims(token);
  if (!c || !c.sub) return showSignIn("");
  S.token = token;
  S.csrf = null;
  let list = null;
  try {
    list = await api("/v1/circles");
  } catch (error) {
    if (error instanceof APIError && error.status === 401) {
      if (error.code === "token_expired" && S.dev) {
        try {
          return await signIn(await devToken(c.sub), { keep });
        } catch { /* fall through to the sign-in form */ }
      }
      return showSignIn(error.code === "token_expired" ? "Your session has expired. Sign in again." : "The server refused this token: " + error.message);
    }
    // The server is unreachable: show the app and keep trying to connect.
  }
  S.keepToken = keep;
  if (keep) sessionStorage.setItem("circle.token", token); else sessionStorage.removeItem("circle.token");
  enterApp({ name: c.sub, displayName: "", avatar: null, role: "member" }, list);
}

function enterApp(profile, list) {
  S.user = profile.name;
  S.profile = profile;
  // On a phone the list comes first; on a desktop both show, whatever this class says.
  document.body.className = "signed-in view-list";
  $("tokenin").value = "";
  $("devname").value = "";
  $("signin").classList.add("hidden");
  $("app").classList.remove("hidden");
  showMe();
  if (list) { S.circles = list.circles; renderCircles(); }
  connect();
  loadPeople();
  const last = sessionStorage.getItem("circle.current");
  const asked = S.openAtStart;
  S.openAtStart = null;
  if (asked) openCircle(asked);
  else if (last && !PHONE.matches && S.circles.some((circle) => circle.name === last)) openCircle(last);
  startWorker();
  // Signed in by token, the server decides: the token's user needs an account to approve.
  if (S.deviceCode) openDeviceApproval(S.deviceCode);
}

/// The signed-in person at the bottom of the circle list: avatar (their photo, or initials) and name.
function showMe() {
  const profile = S.profile || { name: S.user };
  $("me").textContent = profile.displayName || profile.name;
  $("me").title = profile.name;
  const face = profileAvatar(profile);
  face.id = "meavatar";
  $("meavatar").replaceWith(face);
  $("welcometitle").textContent = "Welcome, " + (profile.displayName || profile.name);
  $("menuadmin").parentElement.classList.toggle("hidden", profile.role !== "admin");
  const account = !!S.csrf;
  for (const panel of ["profile", "sessions", "tokens", "device"]) {
    document.querySelector(`#menu [data-panel="${panel}"]`).parentElement.classList.toggle("hidden", !account);
  }
}

/// An avatar for a profile: its photo when it has one, else initials on a colour.
function profileAvatar(profile, className = "avatar") {
  if (!profile || !profile.avatar) return avatar(profile ? profile.name : "?", className);
  const node = el("span", className + " pic");
  node.setAttribute("aria-hidden", "true");
  const img = el("img");
  img.alt = "";
  img.src = mediaURL(profile.avatar);
  node.append(img);
  return node;
}

/// People with accounts (GET /v1/users), for display names and for choosing members.
async function loadPeople() {
  try {
    const answer = await api("/v1/users");
    S.people = new Map(answer.users.map((u) => [u.name, u]));
  } catch {
    return;   // a server without accounts, or a token without one: names stay as they are
  }
  const list = $("peoplelist");
  list.replaceChildren(...[...S.people.values()].map((u) => {
    const option = el("option");
    option.value = u.name;
    if (u.displayName) option.label = `${u.displayName} (${u.name})`;
    return option;
  }));
  if (S.current) renderTimeline();
}

/// How a person is shown: their display name when they have one.
function displayName(name) {
  const person = S.people.get(name);
  return person && person.displayName ? person.displayName : name;
}

async function signOut() {
  closeAccountMenu();
  // This device no longer gets the account's pushes (the server deletes them all on "sign out everywhere").
  try { await disablePush(); } catch { /* signed out anyway */ }
  if (S.csrf) {
    try { await api("/v1/auth/signout", { method: "POST" }); } catch { /* the session may be gone already */ }
  }
  sessionStorage.removeItem("circle.token");
  sessionStorage.removeItem("circle.current");
  showSignIn("");
}
$("signout").addEventListener("click", signOut);

// ---------------------------------------------------------------- connection

function wsURL() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  // Signed in by cookie, the browser sends the cookie (and Origin) with the upgrade.
  return `${scheme}//${location.host}${at("/v1/ws")}` + (S.token ? `?token=${encodeURIComponent(S.token)}` : "");
}

const CONN_TEXT = { idle: "", connecting: "Connecting…", connected: "Connected", reconnecting: "Reconnecting…", offline: "Offline" };

function setConn(state, detail) {
  const conn = $("conn");
  conn.dataset.state = state;
  conn.textContent = CONN_TEXT[state];
  const banner = $("banner");
  const showBanner = state === "reconnecting" || state === "offline";
  banner.classList.toggle("hidden", !showBanner);
  banner.dataset.state = state;
  if (showBanner) $("bannertext").textContent = detail || CONN_TEXT[state];
  $("retrynow").classList.toggle("hidden", state !== "reconnecting");
}

function waitingPosts() {
  return S.outbox.filter((p) => p.status === "sending").length;
}

function connect() {
  clearTimeout(S.timer);
  clearInterval(S.countdown);
  S.timer = S.countdown = null;
  if (!S.user) return;
  if (S.ws) { const old = S.ws; S.ws = null; old.close(1000); }
  setConn(S.attempt ? "reconnecting" : "connecting", S.attempt ? "Reconnecting…" : undefined);
  const ws = new WebSocket(wsURL(), "circle.v1");
  S.ws = ws;
  let opened = false;
  ws.addEventListener("open", () => {
    if (S.ws !== ws) return;
    opened = true;
    S.connected = true;
    S.attempt = 0;
    setConn("connected");
    loadCircles();
    for (const name of S.joined) join(name);
    for (const p of S.outbox) if (p.status === "sending") sendPost(p);
    clearInterval(S.heartbeat);
    // The server closes connections that send nothing for 75 s: the circle list (with its
    // unread counts, also of circles not joined here) is asked for every 25 s as the keep-alive.
    S.heartbeat = setInterval(refreshCircles, 25000);
  });
  ws.addEventListener("message", (event) => {
    if (S.ws !== ws) return;
    let message;
    try { message = JSON.parse(event.data); } catch { return; }
    onMessage(message);
  });
  ws.addEventListener("close", async (event) => {
    if (S.ws !== ws) return;
    S.ws = null;
    S.connected = false;
    clearInterval(S.heartbeat);
    presenceLost();
    for (const [, r] of S.requests) r.reject(new Error("disconnected"));
    S.requests.clear();
    if (!S.user) return;
    // 4005: the session ended (signed out, everywhere or here) or the account was disabled.
    if (event.code === 4005) {
      return showSignIn("You were signed out" + (event.reason && event.reason !== "signed out" ? ` (${event.reason})` : "") + ".");
    }
    if (event.code === 4001) return refreshToken();
    if (event.code === 4002 && opened) {
      // Closed for idling (no circle joined, so no keep-alive): connect again quietly.
      S.attempt = 0;
      return connect();
    }
    if (!opened) {
      // A refused upgrade looks like any failed connection to the page: ask over HTTP why.
      const verdict = await checkToken();
      if (S.ws || !S.user) return;
      if (verdict === "expired") return refreshToken();
      if (verdict instanceof Error) return showSignIn(S.csrf ? verdict.message : "The server refused this token: " + verdict.message);
    }
    scheduleReconnect(event.code);
  });
}

/// "ok", "expired", "unreachable", or the server's refusal as an Error.
async function checkToken() {
  try {
    await api("/v1/circles");
    return "ok";
  } catch (error) {
    if (error instanceof APIError && error.status === 401) return error.code === "token_expired" ? "expired" : error;
    if (error instanceof APIError && error.code === "account_disabled") return error;
    return "unreachable";
  }
}

function scheduleReconnect(code) {
  S.attempt += 1;
  // Full jitter (docs/PROTOCOL.md, client checklist); a server going away (1001) is back soon.
  const delay = code === 1001 ? Math.random() * 250 : Math.random() * Math.min(30000, 500 * 2 ** (S.attempt - 1));
  S.reconnectAt = Date.now() + delay;
  const tell = () => {
    const seconds = Math.max(0, Math.ceil((S.reconnectAt - Date.now()) / 1000));
    const waiting = waitingPosts();
    const posts = waiting ? ` · ${waiting} ${waiting === 1 ? "post" : "posts"} waiting to be sent` : "";
    setConn("reconnecting", (seconds ? `Connection lost. Reconnecting in ${seconds} s…` : "Connection lost. Reconnecting…") + posts);
  };
  tell();
  clearInterval(S.countdown);
  S.countdown = setInterval(tell, 1000);
  S.timer = setTimeout(connect, delay);
}

async function refreshToken() {
  if (S.dev && S.user && S.token) {
    try {
      S.token = await devToken(S.user);
      if (S.keepToken) sessionStorage.setItem("circle.token", S.token);
      S.attempt = 0;
      connect();
      return;
    } catch { /* sign in again */ }
  }
  showSignIn("Your session has expired. Sign in again.");
}

function reconnectNow() {
  if (S.user && !S.connected && !(S.ws && S.ws.readyState === WebSocket.CONNECTING)) {
    S.attempt = 0;
    connect();
  }
}
$("retrynow").addEventListener("click", reconnectNow);
document.addEventListener("visibilitychange", () => { if (!document.hidden) { reconnectNow(); markRead(); } });
window.addEventListener("focus", () => markRead());
window.addEventListener("online", reconnectNow);

function sendRaw(message) {
  if (S.ws && S.ws.readyState === WebSocket.OPEN) S.ws.send(JSON.stringify(message));
}

function request(message) {
  message.id = message.id || "w" + (++S.counter);
  return new Promise((resolve, reject) => {
    if (!S.connected) return reject(new Error("offline"));
    S.requests.set(message.id, { resolve, reject });
    sendRaw(message);
    setTimeout(() => { if (S.requests.delete(message.id)) reject(new Error("timed out")); }, 10000);
  });
}

// ---------------------------------------------------------------- circle state

function circleData(name) {
  let d = S.data.get(name);
  if (!d) {
    // posts: seq -> post; last: newest seq received in order (the `since` of the next join);
    // oldest: the first seq loaded; more: older posts exist; notices: presence lines
    // ({after: seq, text, n}); view: where the reader was when they left the circle.
    // newAfter: the read marker when the circle was opened with unread posts (the "New" line
    // goes above the first post after it that is not the reader's own); readSent: the newest
    // marker asked for; joinedOn: the WebSocket whose join of this circle was acknowledged;
    // presence: who is known to be here, whose leave waits to be said, see onJoined.
    d = { posts: new Map(), last: null, oldest: null, more: true, loaded: false, loading: false, notices: [],
          newAfter: null, view: null, readSent: 0, joinedOn: null,
          presence: { present: new Set(), leaving: new Map(), away: new Map(), joinedAt: 0 } };
    S.data.set(name, d);
  }
  return d;
}

function circleInfo(name) {
  return S.circles.find((c) => c.name === name) || null;
}

/// Reactions as emoji -> Set of users, from a history page's snapshot
/// ([{emoji, count, users, me}]).
function reactionMap(list) {
  const map = new Map();
  for (const r of list || []) {
    const users = new Set(r.users || []);
    if (r.me) users.add(S.user);
    if (users.size) map.set(r.emoji, users);
  }
  return map;
}

/// Inserts or replaces a post (not a change entry) by seq, as docs/PROTOCOL.md says a reader
/// applies entries: the entry's text, attachment, edit time, tombstone and reply are taken as
/// they are; reactions are kept unless the entry brings a snapshot (history pages do).
function acceptPost(d, m) {
  const known = d.posts.get(m.seq);
  const post = { ...m };
  delete post.type;
  post.reactions = Array.isArray(m.reactions) ? reactionMap(m.reactions) : known ? known.reactions : new Map();
  post.rev = known ? known.rev + 1 : 0;
  d.posts.set(m.seq, post);
  return !known;
}

/// Applies an edit, delete, react or unreact entry to the post it targets. A target the page
/// does not hold (older than what it loaded) is ignored; applying an entry twice changes nothing.
function applyChange(d, m) {
  const target = d.posts.get(m.target);
  if (!target) return false;
  switch (m.change) {
    case "edit":
      if (target.deleted) return false;
      if (typeof m.text === "string") target.text = m.text;
      target.edited = m.time;
      break;
    case "delete":
      target.deleted = true;
      delete target.text;
      delete target.attachment;
      delete target.edited;
      target.reactions = new Map();
      break;
    case "react": {
      if (target.deleted || !m.emoji) return false;
      const users = target.reactions.get(m.emoji) || new Set();
      users.add(m.author);
      target.reactions.set(m.emoji, users);
      break;
    }
    case "unreact": {
      const users = target.reactions.get(m.emoji);
      if (!users) return false;
      users.delete(m.author);
      if (!users.size) target.reactions.delete(m.emoji);
      break;
    }
    default:
      return false;
  }
  target.rev += 1;
  return true;
}

/// Unread posts among those loaded: after the marker, not the reader's own, not deleted.
function countUnread(d, readSeq) {
  let n = 0;
  for (const [seq, p] of d.posts) if (seq > readSeq && p.author !== S.user && !p.deleted && !p.event) n += 1;
  return n;
}

/// Whether the open circle's conversation is laid out on screen: on a phone, the circle list
/// screen hides it while S.current still names the circle last opened.
function conversationShown() {
  const box = $("messages");
  return !!S.current && box.getClientRects().length > 0 && box.clientHeight > 0;
}

/// Whether the reader can see the newest post of the open circle right now: the tab visible
/// and focused, the conversation on screen, and scrolled to its newest post.
function readingNewest() {
  if (document.hidden || !document.hasFocus() || !conversationShown()) return false;
  const box = $("messages");
  return S.pinned || box.scrollHeight - box.scrollTop - box.clientHeight < 40;
}

/// Marks read once the current task is done, so that a circle being opened is judged where it
/// ends up (at the "New" line or at the bottom), not where a first drawing left it.
let markQueued = false;
function scheduleMarkRead() {
  if (markQueued) return;
  markQueued = true;
  queueMicrotask(() => { markQueued = false; markRead(); });
}

/// Moves the read marker to the newest entry once the reader sees it (tab focused, newest post
/// on screen, the circle joined on this connection).
function markRead() {
  const name = S.current;
  if (!name || !S.connected) return;
  const d = circleData(name);
  const c = circleInfo(name);
  if (!c || d.last === null || d.joinedOn !== S.ws || !readingNewest()) return;
  const upTo = d.last;
  if (upTo <= (c.readSeq || 0) || upTo <= d.readSent) return;
  d.readSent = upTo;
  request({ action: "read", circle: name, seq: upTo }).then((ack) => {
    const seq = typeof ack.seq === "number" ? ack.seq : upTo;
    c.readSeq = Math.max(c.readSeq || 0, seq);
    c.unread = countUnread(d, c.readSeq);
    renderCircles();
  }).catch(() => { d.readSent = 0; });
}

/// A line in the timeline that is not a post, at the place `at` ({after: seq, time}) or here and now.
function notice(circle, text, at) {
  const d = circleData(circle);
  const place = at || { after: d.last === null ? 0 : d.last, time: Date.now() };
  d.notices.push({ after: place.after, text, n: ++S.noticeCounter, time: place.time });
  if (d.notices.length > MAX_NOTICES) d.notices.splice(0, d.notices.length - MAX_NOTICES);
  if (circle === S.current) renderTimeline();
}

function onMessage(m) {
  switch (m.type) {
    case "ack":
    case "error":
    case "history":
    case "circles": {
      const pending = S.outbox.find((p) => p.id === m.id);
      if (pending) settlePending(pending, m);
      const r = S.requests.get(m.id);
      if (r) {
        S.requests.delete(m.id);
        if (m.type === "error") r.reject(new Error(m.message)); else r.resolve(m);
      }
      break;
    }
    case "post": {
      const d = circleData(m.circle);
      if (d.last === null || m.seq > d.last) d.last = m.seq;
      const c = circleInfo(m.circle);
      if (m.change) {
        // An edit, delete or reaction: it changes a post already shown (and the unread count
        // when a post is deleted), never adds one.
        const target = d.posts.get(m.target);
        const wasUnread = c && target && !target.deleted && target.author !== S.user && target.seq > (c.readSeq || 0);
        if (applyChange(d, m) && wasUnread && m.change === "delete" && m.seq > (c.lastSeq || 0)) {
          c.unread = Math.max(0, (c.unread || 0) - 1);
          renderCircles();
        }
        if (c && m.seq > (c.lastSeq || 0)) c.lastSeq = m.seq;
        if (m.circle === S.current) renderTimeline();
        break;
      }
      const isNew = acceptPost(d, m);
      if (d.oldest === null || m.seq < d.oldest) d.oldest = m.seq;
      const mine = m.author === S.user;
      if (mine) S.outbox = S.outbox.filter((p) => !(p.id === m.id && p.circle === m.circle));
      // Counted once: the circle list's count covers entries up to its lastSeq.
      if (c && m.seq > (c.lastSeq || 0)) {
        c.lastSeq = m.seq;
        // A system entry (member added, removed, left) is not unread.
        if (isNew && !mine && !m.deleted && !m.event && m.seq > (c.readSeq || 0)) {
          c.unread = (c.unread || 0) + 1;
          if (mentionsMe(m)) c.mentions = (c.mentions || 0) + 1;
          if (m.circle === S.current && d.newAfter === null && !readingNewest()) d.newAfter = c.readSeq || 0;
          renderCircles();
        }
      }
      if (m.circle === S.current) {
        if (mine) S.pinned = true;
        renderTimeline();
      }
      break;
    }
    case "read": {
      // The reader's own other tab or device moved the marker.
      const c = circleInfo(m.circle);
      if (c && m.seq > (c.readSeq || 0)) {
        c.readSeq = m.seq;
        const d = S.data.get(m.circle);
        c.unread = d && d.loaded && d.oldest !== null && d.oldest <= m.seq + 1 ? countUnread(d, m.seq) : c.unread;
        renderCircles();
        refreshCircles();
      }
      break;
    }
    case "added": {
      // This user was added to a circle, or someone started a direct message with them: it is
      // listed at once (not at the list's next refresh).
      const info = m.circle;
      if (info && typeof info.name === "string" && !circleInfo(info.name)) {
        S.circles.push(info);
        renderCircles();
      }
      break;
    }
    case "notify": {
      // The level was set on one of this user's connections (this one included).
      const c = circleInfo(m.circle);
      if (c) { c.notify = m.level; renderCircles(); }
      break;
    }
    case "typing":
      if (m.user !== S.user) {
        circleData(m.circle).presence.present.add(m.user);
        showTyping(m.circle, m.user);
      }
      break;
    case "joined":
      if (m.user !== S.user) onJoined(m.circle, m.user);
      break;
    case "left":
      if (m.user !== S.user) onLeft(m.circle, m.user);
      stopTyping(m.circle, m.user);
      break;
    case "gap":
      notice(m.circle, `Posts ${m.from}–${m.to} are no longer available`);
      break;
  }
}

function presenceTiming() {
  try {
    const t = JSON.parse(sessionStorage.getItem("circle.presence") || "{}");
    return { settle: Number.isFinite(t.settle) ? t.settle : PRESENCE.settle, away: Number.isFinite(t.away) ? t.away : PRESENCE.away };
  } catch {
    return PRESENCE;
  }
}

/// `joined`: said only when it tells something, someone coming online. Not said when the person's
/// leave came less than AWAY ago (a reload, a reconnect: their leave was not said either), when
/// they were here when this page lost its connection and come back less than AWAY after the page
/// did (a server restart), or within SETTLE of this page's own join of the circle (after a restart
/// everyone comes back at once, and this page cannot tell who was here before).
function onJoined(circle, user) {
  const p = circleData(circle).presence;
  const t = presenceTiming();
  const now = Date.now();
  const leaving = p.leaving.get(user);
  if (leaving) { clearTimeout(leaving.timer); p.leaving.delete(user); }
  const awaySince = p.away.get(user);
  p.away.delete(user);
  const wasHere = p.present.has(user);
  p.present.add(user);
  if (leaving || wasHere) return;
  if (awaySince !== undefined && now - awaySince < t.away) return;
  if (now - p.joinedAt < t.settle) return;
  notice(circle, `${user} joined`);
}

/// `left`: said once the person has stayed away for AWAY, at the place and time they left.
function onLeft(circle, user) {
  const d = circleData(circle);
  const p = d.presence;
  p.present.delete(user);
  if (p.leaving.has(user)) return;
  const at = { after: d.last === null ? 0 : d.last, time: Date.now() };
  at.timer = setTimeout(() => {
    if (p.leaving.get(user) !== at || S.data.get(circle) !== d) return;
    p.leaving.delete(user);
    notice(circle, `${user} left`, at);
  }, presenceTiming().away);
  p.leaving.set(user, at);
}

/// This page's connection dropped: it will not see who comes and goes until it has joined again.
/// Whoever was here, or had just left, counts as away since then, so that their join after the
/// reconnect is not said; a leave waiting to be said is dropped (their return would go unseen).
function presenceLost() {
  const now = Date.now();
  for (const d of S.data.values()) {
    const p = d.presence;
    for (const user of p.present) p.away.set(user, now);
    for (const [user, at] of p.leaving) { clearTimeout(at.timer); p.away.set(user, at.time); }
    p.present.clear();
    p.leaving.clear();
  }
}

/// The answer to one of our own posts: stored (ack), refused (error), or to be sent again.
function settlePending(pending, m) {
  if (m.type === "ack") {
    S.outbox = S.outbox.filter((p) => p !== pending);
    const d = circleData(pending.circle);
    if (!d.posts.has(m.seq)) {
      // The ack can come before the post's own event: show it as stored right away.
      const post = { circle: pending.circle, seq: m.seq, author: S.user, id: pending.id, time: m.time || Date.now(), reactions: new Map(), rev: 0 };
      if (pending.text) post.text = pending.text;
      if (pending.attachment) post.attachment = pending.attachment;
      if (pending.replyTo) post.replyTo = pending.replyTo;
      d.posts.set(m.seq, post);
      if (d.oldest === null) d.oldest = m.seq;
    }
  } else if (m.type === "error") {
    if (m.code === "unavailable" || m.code === "internal" || m.code === "rate_limited") {
      // Worth retrying with the same id: the server de-duplicates it.
      setTimeout(() => { if (S.outbox.includes(pending) && S.connected) sendPost(pending); }, m.code === "rate_limited" ? 1000 : 2000);
      return;
    }
    pending.status = "failed";
    pending.reason = m.message;
  }
  if (pending.circle === S.current) renderTimeline();
}

function showTyping(circle, user) {
  if (!S.typing.has(circle)) S.typing.set(circle, new Map());
  const users = S.typing.get(circle);
  clearTimeout(users.get(user));
  users.set(user, setTimeout(() => stopTyping(circle, user), 4000));
  if (circle === S.current) renderTyping();
}

function stopTyping(circle, user) {
  const users = S.typing.get(circle);
  if (!users || !users.has(user)) return;
  clearTimeout(users.get(user));
  users.delete(user);
  if (circle === S.current) renderTyping();
}

// ---------------------------------------------------------------- circles

function renderCircles() {
  renderCircleList($("circles"), S.circles.filter((c) => !c.direct));
  renderCircleList($("dms"), S.circles.filter((c) => c.direct));
  $("nocircles").classList.toggle("hidden", S.circles.some((c) => !c.direct));
  // The open circle counts too while its newest posts are not seen (tab in the background).
  const total = S.circles.reduce((sum, c) => sum + (c.unread || 0), 0);
  document.title = (total ? `(${total}) ` : "") + (S.current ? `${circleTitle(S.current)} · Circle` : "Circle");
  showBadge(total);
  const info = S.current && S.circles.find((c) => c.name === S.current);
  $("notifyrow").classList.toggle("hidden", !info);
  if (info) $("notify").value = info.notify || (info.direct ? "all" : "mentions");
  updateSend();
}

/// How a circle is named: "#name", or a direct message's other members ("bob, carol").
function circleTitle(name) {
  const info = S.circles.find((c) => c.name === name);
  if (info && info.direct) return dmLabel(info);
  return "#" + name;
}

function dmLabel(info) {
  const others = info.direct.filter((n) => n !== S.user);
  return (others.length ? others : info.direct).map(displayName).join(", ");
}

/// Whether a post mentions the signed-in user (docs/PROTOCOL.md, Mentions).
function mentionsMe(p) {
  return !!p.mentionsEveryone || (Array.isArray(p.mentions) && p.mentions.includes(S.user));
}

function renderCircleList(ul, circles) {
  const items = [];
  // Each circle keeps its element across redraws (the list is drawn again on every `circles`
  // answer): the focus stays on its button, and a click is never lost to a replaced element.
  const existing = new Map([...ul.children].map((li) => [li.dataset.name, li]));
  for (const c of circles) {
    let li = existing.get(c.name);
    let button = li && li.firstElementChild;
    if (!li || !button) {
      li = el("li");
      li.dataset.name = c.name;
      button = el("button");
      button.type = "button";
      button.addEventListener("click", () => openCircle(li.dataset.name));
      li.append(button);
    }
    button.className = "circle-link";
    button.removeAttribute("aria-current");
    button.removeAttribute("title");
    button.replaceChildren();
    if (c.name === S.current) {
      button.classList.add("active");
      button.setAttribute("aria-current", "page");
    }
    if (c.direct) {
      button.append(el("span", "name", dmLabel(c)));
      button.title = "Direct message with " + c.direct.join(", ");
    } else {
      const sigil = el("span", "sigil", c.private ? "" : "#");
      sigil.setAttribute("aria-hidden", "true");
      if (c.private) sigil.appendChild(lockIcon());
      button.append(sigil, el("span", "name", c.name));
      if (c.private) button.title = c.name + " (private)";
    }
    const mentions = c.mentions || 0;
    if (mentions && !(c.name === S.current && conversationShown())) {
      const badge = el("span", "badge mention-badge", "@" + (mentions > 99 ? "99+" : String(mentions)));
      badge.setAttribute("aria-label", `${mentions} mentions of you`);
      button.append(badge);
    }
    const unread = c.unread || 0;
    if (unread && !(c.name === S.current && conversationShown())) {
      button.classList.add("unread");
      const badge = el("span", "badge", unread > 99 ? "99+" : String(unread));
      // The server counts up to 1,000 (docs/PROTOCOL.md, circles).
      badge.setAttribute("aria-label", unread >= 1000 ? "1000 or more unread" : `${unread} unread`);
      button.append(badge);
    }
    items.push(li);
  }
  if (items.length !== ul.children.length || items.some((li, i) => ul.children[i] !== li)) ul.replaceChildren(...items);
}

function lockIcon() {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 20 20");
  svg.setAttribute("class", "lock");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", "M6 9V7a4 4 0 0 1 8 0v2M5 9h10v8H5z");
  svg.appendChild(path);
  return svg;
}

async function loadCircles() {
  try {
    S.circles = (await api("/v1/circles")).circles;
    renderCircles();
  } catch (error) {
    if (error instanceof APIError && error.status === 401 && S.token) showSignIn("The server refused this token: " + error.message);
  }
}

/// The circle list with each circle's newest seq, read marker and unread count, over the
/// WebSocket (`circles`): the page's keep-alive, and how circles it has not joined get counted.
function refreshCircles() {
  request({ action: "circles" }).then((reply) => {
    if (!Array.isArray(reply.circles)) return;
    S.circles = reply.circles;
    renderCircles();
    if (S.current) { markRead(); }
  }).catch(() => {});
}

/// Marks "@me", "@here" and "@everyone" in a rendered post that mentions the user.
function highlightMentions(root) {
  const names = ["@" + S.user, "@here", "@everyone"];
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
  const texts = [];
  while (walker.nextNode()) texts.push(walker.currentNode);
  for (const text of texts) {
    const value = text.nodeValue;
    const parts = [];
    let at = 0;
    for (let i = value.indexOf("@"); i !== -1; i = value.indexOf("@", i + 1)) {
      if (i > 0 && MENTION_CHAR.test(value[i - 1])) continue;
      const name = names.find((n) => value.startsWith(n, i) && endsName(value, i + n.length));
      if (!name) continue;
      parts.push(value.slice(at, i), el("span", "mention", name));
      at = i + name.length;
      i = at - 1;
    }
    if (!parts.length) continue;
    parts.push(value.slice(at));
    text.replaceWith(...parts);
  }
}

/// Whether a name that stops at `end` is a whole name: what follows is no name character, or
/// only sentence punctuation before one that is not.
function endsName(value, end) {
  let j = end;
  while (j < value.length && /[._@-]/.test(value[j])) j++;
  return j >= value.length || !MENTION_CHAR.test(value[j]);
}

/// A character of a user name after "@" (CircleWire's MentionParser).
const MENTION_CHAR = /[\p{L}\p{M}\p{N}._@-]/u;

/// Finds or starts the direct message with `names` (POST /v1/dms) and opens it.
async function startDirectMessage(names) {
  try {
    const dm = await api("/v1/dms", { method: "POST", body: JSON.stringify({ members: names }) });
    const known = S.circles.find((c) => c.name === dm.name);
    if (known) Object.assign(known, dm); else S.circles.push(dm);
    renderCircles();
    await openCircle(dm.name);
    return dm;
  } catch (error) {
    toast("Could not start the conversation: " + error.message);
    throw error;
  }
}

function toggleNewDM(open) {
  $("newdm").classList.toggle("hidden", !open);
  $("newdmbtn").setAttribute("aria-expanded", String(open));
  $("dmerr").textContent = "";
  if (open) $("dmnames").focus(); else $("newdmbtn").focus();
}
$("newdmbtn").addEventListener("click", () => toggleNewDM($("newdm").classList.contains("hidden")));
$("dmcancel").addEventListener("click", () => toggleNewDM(false));
$("newdm").addEventListener("keydown", (event) => { if (event.key === "Escape") toggleNewDM(false); });
$("newdm").addEventListener("submit", async (event) => {
  event.preventDefault();
  const names = $("dmnames").value.split(/[\s,]+/).map((n) => n.replace(/^@/, "")).filter(Boolean);
  if (!names.length) { $("dmerr").textContent = "Name someone to talk with."; return; }
  try {
    await startDirectMessage(names);
    $("dmnames").value = "";
    $("newdm").classList.add("hidden");
    $("newdmbtn").setAttribute("aria-expanded", "false");
  } catch (error) {
    $("dmerr").textContent = error.message;
  }
});

$("notify").addEventListener("change", async () => {
  const circle = S.current;
  if (!circle) return;
  try {
    const answer = await api(`/v1/circles/${encodeURIComponent(circle)}/notify`, { method: "PUT", body: JSON.stringify({ level: $("notify").value }) });
    const c = circleInfo(circle);
    if (c) c.notify = answer.notify;
  } catch (error) {
    toast("Could not change the notifications: " + error.message);
  }
  renderCircles();
});

// ---------------------------------------------------------------- completing names after "@"

const mentionBox = { open: false, start: 0, items: [], selected: 0 };

/// The "@…" being typed before the caret: {start, partial}, or null.
function partialMention() {
  const caret = composer.selectionStart;
  if (caret !== composer.selectionEnd) return null;
  const before = composer.value.slice(0, caret);
  const match = /(^|[^\p{L}\p{M}\p{N}._@-])@([\p{L}\p{M}\p{N}._-]{0,64})$/u.exec(before);
  if (!match) return null;
  return { start: caret - match[2].length - 1, partial: match[2] };
}

/// Who can be mentioned here: the people with accounts, the authors seen in the circle, a
/// direct message's members; without the user.
function mentionCandidates(partial) {
  const names = new Set(S.people.keys());
  const info = S.current && S.circles.find((c) => c.name === S.current);
  if (info && info.direct) for (const n of info.direct) names.add(n);
  if (S.current) for (const p of circleData(S.current).posts.values()) if (p.author) names.add(p.author);
  names.delete(S.user);
  const lower = partial.toLowerCase();
  const found = [...names].filter((n) => n.toLowerCase().startsWith(lower)).sort((a, b) => a.localeCompare(b));
  if (info && (info.owner === S.user || (S.profile && S.profile.role === "admin"))) {
    for (const word of ["here", "everyone"]) if (word.startsWith(lower)) found.push(word);
  }
  return found.slice(0, 8);
}

function updateMentionBox() {
  const at = partialMention();
  const list = $("mentionlist");
  const items = at ? mentionCandidates(at.partial) : [];
  if (!items.length) { closeMentionBox(); return; }
  mentionBox.open = true;
  mentionBox.start = at.start;
  if (items.join("\n") !== mentionBox.items.join("\n")) mentionBox.selected = 0;
  mentionBox.items = items;
  list.replaceChildren(...items.map((name, index) => {
    const li = el("li", undefined, "@" + name);
    li.id = "mention-" + index;
    li.dataset.name = name;
    li.setAttribute("role", "option");
    li.setAttribute("aria-selected", String(index === mentionBox.selected));
    const person = S.people.get(name);
    if (person && person.displayName) li.append(el("span", "hint", " " + person.displayName));
    li.addEventListener("mousedown", (event) => { event.preventDefault(); acceptMention(name); });
    return li;
  }));
  list.classList.remove("hidden");
  composer.setAttribute("aria-activedescendant", "mention-" + mentionBox.selected);
}

function closeMentionBox() {
  mentionBox.open = false;
  mentionBox.items = [];
  $("mentionlist").classList.add("hidden");
  composer.removeAttribute("aria-activedescendant");
}

function acceptMention(name) {
  const caret = composer.selectionStart;
  const text = composer.value;
  const insert = "@" + name + " ";
  composer.value = text.slice(0, mentionBox.start) + insert + text.slice(caret);
  const at = mentionBox.start + insert.length;
  composer.setSelectionRange(at, at);
  closeMentionBox();
  autosize();
  updateSend();
  composer.focus();
}

function toggleCreate(open) {
  $("create").classList.toggle("hidden", !open);
  $("newbtn").setAttribute("aria-expanded", String(open));
  $("createerr").textContent = "";
  $("newcircle").removeAttribute("aria-invalid");
  if (open) $("newcircle").focus(); else $("newbtn").focus();
}
$("newbtn").addEventListener("click", () => toggleCreate($("create").classList.contains("hidden")));
$("createcancel").addEventListener("click", () => toggleCreate(false));
$("create").addEventListener("keydown", (event) => { if (event.key === "Escape") toggleCreate(false); });
$("newcircle").addEventListener("input", () => {
  $("newcircle").removeAttribute("aria-invalid");
  $("createerr").textContent = "";
});
$("create").addEventListener("submit", async (event) => {
  event.preventDefault();
  const input = $("newcircle");
  const name = input.value.trim();
  const fail = (message) => {
    input.setAttribute("aria-invalid", "true");
    $("createerr").textContent = message;
    input.focus();
  };
  if (!name) return fail("Give the circle a name.");
  if (!input.checkValidity()) return fail("Use 1–64 lower-case letters, digits, “.”, “_” or “-”.");
  $("createbtn").disabled = true;
  try {
    await api("/v1/circles", { method: "POST", body: JSON.stringify({ name, private: $("newprivate").checked }) });
    input.value = "";
    $("newprivate").checked = false;
    toggleCreate(false);
    await loadCircles();
    openCircle(name);
  } catch (error) {
    fail(error.code === "conflict" ? `There is already a circle called “${name}”.` : error.message);
  } finally {
    $("createbtn").disabled = false;
  }
});

// ---------------------------------------------------------------- opening a circle, history

function saveView() {
  if (!S.current) return;
  const box = $("messages");
  const d = circleData(S.current);
  d.view = { pinned: S.pinned, fromBottom: box.scrollHeight - box.scrollTop };
  d.newAfter = null;
}

async function openCircle(name) {
  if (name !== S.current) saveView();
  S.current = name;
  sessionStorage.setItem("circle.current", name);
  document.body.classList.remove("view-list");
  document.body.classList.add("view-chat");
  const info = S.circles.find((c) => c.name === name);
  if (info && info.direct) {
    $("title").textContent = dmLabel(info);
    $("subtitle").textContent = "Direct message · " + info.direct.map(displayName).join(", ");
  } else {
    $("title").textContent = (info && info.private ? "" : "# ") + name;
    if (info && info.private) $("title").prepend(lockIcon());
    $("subtitle").textContent = info ? `${info.private ? "Private circle: members only" : "Public circle"} · started by ${displayName(info.owner)}` : "";
  }
  $("membersbtn").classList.remove("hidden");
  $("welcome").classList.add("hidden");
  $("main").classList.remove("no-circle");
  for (const id of ["text", "attach", "photo"]) $(id).disabled = false;
  $("text").placeholder = `Message ${circleTitle(name)}`;
  updateSend();
  const d = circleData(name);
  if (S.replyTo && S.replyTo.circle !== name) setReply(null);
  if (S.staged && S.staged.circle !== name) unstagePhoto({ keepFocus: true }); else showStaged();
  // The "New" line where the reader left off: where their marker is, or (never marked, as in a
  // circle that was empty) where this tab last showed it. A circle never read opens at the
  // newest post, as a channel one has never visited does elsewhere.
  if (info && info.unread && ((info.readSeq || 0) > 0 || d.view !== null || S.joined.has(name))) d.newAfter = info.readSeq || 0;
  renderCircles();
  renderTyping();
  renderTimeline();
  // Back where the reader left it: at the newest post, or at the place they had scrolled to.
  const box = $("messages");
  if (d.view && !d.view.pinned) {
    S.pinned = false;
    box.scrollTop = box.scrollHeight - d.view.fromBottom;
  } else {
    S.pinned = true;
    box.scrollTop = box.scrollHeight;
  }
  startAtNew();
  updateJump();
  if (!PHONE.matches) $("text").focus();
  if (!d.loaded) await loadOlder(name, true);
  if (!S.joined.has(name)) {
    S.joined.add(name);
    if (S.connected) join(name);
  }
}

/// More came in while away than fits: start at the first of it, as Slack and Element do.
function startAtNew() {
  const box = $("messages");
  const line = circleData(S.current).newAfter !== null ? $("list").querySelector(".new-line") : null;
  if (!line) return;
  const top = line.getBoundingClientRect().top - box.getBoundingClientRect().top + box.scrollTop;
  if (box.scrollHeight - top > box.clientHeight) {
    S.pinned = false;
    box.scrollTop = Math.max(0, top - 24);
  }
}

function join(name) {
  const d = circleData(name);
  const message = { action: "join", circle: name };
  if (d.last !== null) message.since = d.last;
  const ws = S.ws;
  // Who was here when the connection dropped counts as away from now: what they did meanwhile
  // went unseen (see onJoined).
  d.presence.joinedAt = Date.now();
  for (const user of d.presence.away.keys()) d.presence.away.set(user, d.presence.joinedAt);
  request(message).then((ack) => {
    if (d.last === null) d.last = ack.seq;
    if (S.ws === ws) {
      d.joinedOn = ws;
      d.readSent = 0;
      if (name === S.current) markRead();
    }
  }).catch((error) => {
    if (error.message === "disconnected" || error.message === "offline") return;
    S.joined.delete(name);
    notice(name, "Could not join: " + error.message);
  });
}

async function loadOlder(name, initial) {
  const d = circleData(name);
  if (d.loading || (!initial && !d.more)) return;
  d.loading = true;
  if (name === S.current) showOlder("Loading older posts…");
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (!initial && d.oldest !== null) query.set("before", String(d.oldest));
  try {
    // A page read before a change this tab has already applied from its WebSocket (lastSeq below
    // the stream's position) would take that change back: keep the posts held, add the others,
    // and ask again; the answer then reflects the change (docs/PROTOCOL.md, Applying changes).
    let page, stale;
    for (let attempt = 1; ; attempt += 1) {
      page = await api(`/v1/circles/${encodeURIComponent(name)}/messages?` + query);
      stale = typeof page.lastSeq === "number" && d.last !== null && page.lastSeq < d.last;
      if (!stale || attempt >= 3) break;
    }
    const box = $("messages");
    const fromBottom = box.scrollHeight - box.scrollTop;
    for (const p of page.posts) if (!stale || !d.posts.has(p.seq)) acceptPost(d, p);
    if (page.posts.length) {
      const first = page.posts[0].seq;
      const last = page.posts[page.posts.length - 1].seq;
      if (d.oldest === null || first < d.oldest) d.oldest = first;
      if (d.last === null || last > d.last) d.last = last;
    }
    // The first page is the newest one: whether older ones exist is its `more`. A post that
    // arrived live before it does not change that.
    d.more = page.more;
    d.loaded = true;
    d.loading = false;
    if (name !== S.current) return;
    renderTimeline();
    if (initial || S.pinned) {
      box.scrollTop = box.scrollHeight;
      if (initial) { S.pinned = true; startAtNew(); updateJump(); }
    } else {
      box.scrollTop = box.scrollHeight - fromBottom;
    }
    markRead();
    // A short first page does not fill the pane, so no scroll would ever ask for more.
    if (d.more && box.scrollHeight <= box.clientHeight + 40) loadOlder(name, false);
  } catch (error) {
    d.loading = false;
    if (name === S.current) showOlder("Could not load posts: " + error.message);
    if (error instanceof APIError && error.status === 401 && S.token) showSignIn("The server refused this token: " + error.message);
  }
}

function showOlder(text) {
  const older = $("older");
  older.textContent = text || "";
  older.classList.toggle("hidden", !text);
}

// ---------------------------------------------------------------- the timeline

function postKey(p) {
  return (p.author || S.user) + "\n" + p.id;
}

function postTime(p) {
  return p.time || p.created || Date.now();
}

function photoNode(p) {
  const box = el("button", "photo");
  box.type = "button";
  box.setAttribute("aria-label", "Open the photo");
  const img = el("img");
  img.alt = p.text ? "Photo: " + p.text.slice(0, 80) : "Photo from " + (p.author || S.user);
  img.decoding = "async";
  img.loading = "lazy";
  sizePhotoBox(box, p.attachment ? photoSizes.get(p.attachment) : p.previewSize);
  img.addEventListener("load", () => {
    const size = [img.naturalWidth, img.naturalHeight];
    if (p.attachment) rememberPhotoSize(p.attachment, ...size);
    sizePhotoBox(box, size);
    box.classList.add("loaded");
  });
  img.addEventListener("error", () => {
    box.classList.remove("unsized");
    box.classList.add("broken");
    box.replaceChildren(el("span", "broken-text", "The photo could not be loaded"));
  });
  img.src = p.preview || mediaURL(p.attachment);
  box.appendChild(img);
  box.addEventListener("click", () => openViewer(p.attachment, img.src));
  return box;
}

/// A short plain-text line for a post: its text's first line, or what it is.
function snippet(p) {
  if (!p) return "a post that is not loaded";
  if (p.deleted) return "message deleted";
  // Plain text: the Markdown marks of emphasis and code are left out (not inside words).
  const text = (p.text || "").replace(/\s+/g, " ").trim()
    .replace(/(\*\*|__|~~|`)(?=\S)(.+?)(?<=\S)\1/g, "$2")
    .replace(/(^|[^\w*])([*_])(?=\S)(.+?)(?<=\S)\2(?![\w*])/g, "$1$3");
  if (text) return text.length > 120 ? text.slice(0, 119) + "…" : text;
  return p.attachment ? "Photo" : "";
}

/// Whether the reader may delete `p`: their own post, or any post of a private circle they own.
function mayDelete(p) {
  if ((p.author || S.user) === S.user) return true;
  const c = circleInfo(p.circle);
  return !!(c && c.private && c.owner === S.user);
}

function reactionsSignature(p) {
  if (!p.reactions || !p.reactions.size) return "";
  return [...p.reactions].map(([emoji, users]) => emoji + [...users].join(",")).join(";");
}

/// The element of a post, reused while its look stays the same (so its photo is not fetched again).
function postNode(p, status) {
  const key = postKey(p);
  let node = S.nodes.get(key);
  const d = circleData(p.circle);
  const quoted = p.replyTo ? d.posts.get(p.replyTo) : null;
  const editing = S.editing && S.editing.key === key && !p.deleted;
  const signature = [status, p.seq || "", postTime(p), p.attachment || "", p.reason || "", p.progress || "", p.rev || 0,
    p.deleted ? "D" : "", p.text || "", p.edited || "", reactionsSignature(p),
    p.replyTo ? p.replyTo + ":" + (quoted ? (quoted.author + snippet(quoted)) : "") : "",
    editing ? "E" : "", S.confirming === key ? "C" : "", S.menu === key ? "M" : "", personSignature(p.author || S.user),
    mentionsMe(p) ? "@" : ""].join("|");
  if (node && node.dataset.signature === signature) return node;
  const photo = node && node.photo && (p.attachment || p.preview) ? node.photo : null;
  if (!node) {
    node = el("article", "post");
    S.nodes.set(key, node);
    addLongPress(node, key);
  }
  node.dataset.signature = signature;
  node.dataset.state = status;
  node.dataset.author = p.author || S.user;
  if (p.seq) node.dataset.seq = String(p.seq); else delete node.dataset.seq;
  const mine = (p.author || S.user) === S.user;
  node.classList.toggle("mine", mine);
  node.classList.toggle("pending", status === "sending" || status === "uploading");
  node.classList.toggle("failed", status === "failed");
  node.classList.toggle("deleted", !!p.deleted);
  node.classList.toggle("editing", !!editing);
  node.classList.toggle("menu-open", S.menu === key);
  node.classList.toggle("mentioned", mentionsMe(p));

  const gutter = el("div", "gutter");
  gutter.append(personAvatar(p.author || S.user), timeNode(postTime(p), "side-time"));
  const content = el("div", "content");
  const head = el("div", "head");
  const author = mine ? el("span", "author", displayName(S.user)) : el("button", "author person", displayName(p.author));
  if (!mine) {
    // A person's name starts (or opens) a direct message with them.
    author.type = "button";
    author.title = `Message ${p.author}`;
    author.addEventListener("click", () => startDirectMessage([p.author]));
  } else if (author.textContent !== S.user) {
    author.title = S.user;
  }
  head.append(author, timeNode(postTime(p), "time"));
  content.append(head);
  if (p.replyTo && !p.deleted) content.append(quoteNode(p, quoted));
  if (p.deleted) {
    content.append(el("div", "tombstone", "message deleted"));
    node.photo = null;
  } else if (editing) {
    content.append(editorNode(p));
  } else {
    if (p.text) {
      const body = el("div", "body");
      body.appendChild(window.CircleMarkdown.render(p.text));
      if (mentionsMe(p)) highlightMentions(body);
      if (p.edited) {
        const mark = el("span", "edited", "(edited)");
        mark.title = "Edited " + fullFormat.format(p.edited);
        (body.lastElementChild && body.lastElementChild.tagName === "P" ? body.lastElementChild : body).append(" ", mark);
      }
      content.append(body);
    } else if (p.edited) {
      content.append(el("span", "edited", "(edited)"));
    }
    if (p.attachment || p.preview) {
      node.photo = photo || photoNode(p);
      content.append(node.photo);
    }
  }
  if (!p.deleted && p.reactions && p.reactions.size && status === "sent") content.append(reactionsNode(p));
  if (S.confirming === key && !p.deleted) content.append(confirmNode(p));
  if (status !== "sent") content.append(statusNode(p, status));
  const children = [gutter, content];
  if (status === "sent" && p.seq && !p.deleted && !editing) children.push(actionsNode(p, key, mine));
  node.replaceChildren(...children);
  return node;
}

function quoteNode(p, quoted) {
  const quote = el("button", "quote");
  quote.type = "button";
  quote.dataset.target = String(p.replyTo);
  if (quoted) quote.append(el("span", "quote-author", displayName(quoted.author)));
  quote.append(el("span", "quote-text", snippet(quoted)));
  quote.setAttribute("aria-label", `In reply to ${quoted ? quoted.author + ": " : ""}${snippet(quoted)}. Show that post.`);
  quote.addEventListener("click", () => scrollToPost(p.circle, p.replyTo));
  return quote;
}

function reactionsNode(p) {
  const row = el("div", "reactions");
  for (const [emoji, users] of p.reactions) {
    const chip = el("button", "chip");
    chip.type = "button";
    chip.dataset.emoji = emoji;
    const me = users.has(S.user);
    chip.classList.toggle("me", me);
    chip.setAttribute("aria-pressed", String(me));
    chip.title = [...users].join(", ") + " reacted with " + emoji;
    chip.append(el("span", "chip-emoji", emoji), el("span", "chip-count", String(users.size)));
    chip.addEventListener("click", () => toggleReaction(p, emoji));
    row.append(chip);
  }
  const add = el("button", "chip add-reaction");
  add.type = "button";
  add.title = "Add a reaction";
  add.setAttribute("aria-label", "Add a reaction");
  add.append(smileIcon());
  add.addEventListener("click", (event) => { event.stopPropagation(); openPicker(p, add); });
  row.append(add);
  return row;
}

function actionButton(label, icon, className, onClick) {
  const button = el("button", "icon-button " + className);
  button.type = "button";
  button.title = label;
  button.setAttribute("aria-label", label);
  button.append(icon);
  button.addEventListener("click", (event) => { event.stopPropagation(); onClick(button); });
  return button;
}

function svgIcon(d) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 20 20");
  svg.setAttribute("aria-hidden", "true");
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", d);
  svg.appendChild(path);
  return svg;
}

function smileIcon() {
  return svgIcon("M10 3a7 7 0 1 0 0 14 7 7 0 0 0 0-14zM7 12a3.5 3.5 0 0 0 6 0M7.5 8h.01M12.5 8h.01");
}

/// The post's actions: on hover (desktop), on a long press (phone), or with the keyboard.
function actionsNode(p, key, mine) {
  const bar = el("div", "actions");
  bar.setAttribute("role", "toolbar");
  bar.setAttribute("aria-label", "Post actions");
  bar.append(actionButton("React", smileIcon(), "act-react", (button) => openPicker(p, button)));
  bar.append(actionButton("Reply", svgIcon("M8 5L3 10l5 5M3 10h9a5 5 0 0 1 5 5v1"), "act-reply", () => { closeMenu(); setReply(p); }));
  if (mine) bar.append(actionButton("Edit", svgIcon("M13.5 3.5l3 3L7 16H4v-3zM11.5 5.5l3 3"), "act-edit", () => startEdit(p)));
  if (mayDelete(p)) {
    bar.append(actionButton("Delete", svgIcon("M4 6h12M8 6V4h4v2M6 6l1 10h6l1-10"), "act-delete", () => {
      closeMenu();
      S.confirming = key;
      renderTimeline();
      const yes = S.nodes.get(key) && S.nodes.get(key).querySelector(".confirm .danger");
      if (yes) yes.focus();
    }));
  }
  return bar;
}

function confirmNode(p) {
  const line = el("div", "confirm");
  line.append(el("span", "", "Delete this post?"));
  const yes = el("button", "danger", "Delete");
  yes.type = "button";
  yes.addEventListener("click", () => {
    S.confirming = null;
    sendChange({ action: "delete", circle: p.circle, target: p.seq });
    renderTimeline();
  });
  const no = el("button", "", "Cancel");
  no.type = "button";
  no.addEventListener("click", () => { S.confirming = null; renderTimeline(); });
  line.append(yes, no);
  return line;
}

function editorNode(p) {
  const form = el("form", "editor");
  const area = el("textarea");
  area.rows = 1;
  area.value = S.editing.draft;
  area.setAttribute("aria-label", "Edit the post");
  area.addEventListener("input", () => {
    S.editing.draft = area.value;
    area.style.height = "auto";
    area.style.height = Math.min(area.scrollHeight, 240) + "px";
  });
  area.addEventListener("keydown", (event) => {
    if (event.key === "Escape") { event.preventDefault(); endEdit(); }
    else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) { event.preventDefault(); form.requestSubmit(); }
  });
  const row = el("div", "editor-row");
  row.append(el("span", "hint", "Enter to save · Esc to cancel"));
  const cancel = el("button", "", "Cancel");
  cancel.type = "button";
  cancel.addEventListener("click", endEdit);
  const save = el("button", "primary", "Save");
  save.type = "submit";
  row.append(cancel, save);
  form.append(area, row);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = area.value.replace(/^\s*\n|\s+$/g, "");
    const editing = S.editing;
    endEdit();
    if (!editing || !text.trim() || text === p.text) return;
    sendChange({ action: "edit", circle: p.circle, target: p.seq, text });
  });
  requestAnimationFrame(() => {
    if (!area.isConnected || document.activeElement === area) return;
    area.focus();
    area.setSelectionRange(area.value.length, area.value.length);
    area.style.height = Math.min(area.scrollHeight, 240) + "px";
  });
  return form;
}

function startEdit(p) {
  closeMenu();
  closePicker();
  S.editing = { key: postKey(p), circle: p.circle, seq: p.seq, draft: p.text || "" };
  renderTimeline();
}

function endEdit() {
  const key = S.editing && S.editing.key;
  S.editing = null;
  renderTimeline();
  if (!PHONE.matches) composer.focus();
  return key;
}

function statusNode(p, status) {
  const line = el("div", "status");
  if (status === "uploading") {
    line.textContent = p.progress ? `Uploading photo… ${p.progress}%` : "Uploading photo…";
  } else if (status === "sending") {
    line.textContent = S.connected ? "Sending…" : "Waiting for the connection…";
  } else if (status === "failed") {
    line.append(el("span", "reason", "Not posted: " + (p.reason || "refused")));
    if (p.attachment || p.file || p.text) {
      const retry = el("button", "link-button", "Retry");
      retry.type = "button";
      retry.addEventListener("click", () => retryPost(p));
      line.append(retry);
    }
    const discard = el("button", "link-button", "Discard");
    discard.type = "button";
    discard.addEventListener("click", () => discardPost(p));
    line.append(discard);
  }
  return line;
}

/// A system entry in words (docs/PROTOCOL.md, System entries): "ann added bob", "bob left".
function systemText(p) {
  const member = p.member || "someone";
  switch (p.event) {
    case "added": return `${p.author} added ${member}`;
    case "removed": return `${p.author} removed ${member}`;
    case "left": return `${member} left`;
    default: return `${p.author}: ${p.event}`;
  }
}

function systemNode(p) {
  const node = el("div", "system-entry");
  node.dataset.systemSeq = String(p.seq);
  node.append(el("span", "system-text", systemText(p)), timeNode(p.time, "notice-time"));
  return node;
}

function noticeNode(n) {
  const node = el("div", "notice");
  node.append(el("span", "notice-text", n.text), timeNode(n.time, "notice-time"));
  return node;
}

function separatorNode(ms) {
  const node = el("div", "day");
  node.setAttribute("role", "separator");
  node.append(el("span", "", dayLabel(ms)));
  return node;
}

const dateFormat = new Intl.DateTimeFormat(undefined, { year: "numeric", month: "long", day: "numeric" });

/// The circle's start, shown above its first entry once the history reaches it (docs/PROTOCOL.md,
/// System entries: not an entry of its own; hidden with the circle's system entries).
function originText(info) {
  if (!info || info.systemEntries === false) return "";
  const who = displayName(info.owner);
  return (info.direct ? `${who} started this direct message` : `${who} created #${info.name}`) + ` on ${dateFormat.format(info.createdAt)}`;
}

function introNode(name, empty, origin) {
  const node = el("div", "intro");
  const info = S.circles.find((c) => c.name === name);
  const badge = el("div", "intro-badge", info && info.private ? "" : "#");
  if (info && info.private) badge.appendChild(lockIcon());
  badge.setAttribute("aria-hidden", "true");
  node.append(badge, el("h2", "", `This is the beginning of #${name}`));
  node.append(el("p", "", empty
    ? "No posts yet. Say hello below: everyone here sees it live, and it stays in the history."
    : (info && info.private ? "A private circle: only its members can read it." : "Everyone on this server can read and join this circle.")));
  if (origin) node.append(el("p", "intro-origin", origin));
  return node;
}

/// A timeline element other than a post (day line, notice, intro), made once and then reused.
function extra(key, make) {
  let node = S.extras.get(key);
  if (!node) {
    node = make();
    S.extras.set(key, node);
  }
  return node;
}

/// Makes `parent`'s children exactly `wanted`, moving only what changed: the nodes that stay are
/// not taken out and put back, so screen readers announce only new lines of the log, and text
/// selections and loaded images survive.
function reconcile(parent, wanted) {
  wanted.forEach((node, index) => {
    const current = parent.children[index];
    if (current !== node) parent.insertBefore(node, current || null);
  });
  while (parent.children.length > wanted.length) parent.lastElementChild.remove();
}

function renderTimeline() {
  const list = $("list");
  if (!S.current) { list.replaceChildren(); return; }
  const name = S.current;
  const d = circleData(name);
  const items = [];
  for (const [seq, p] of d.posts) items.push({ order: seq, rank: 0, p });
  for (const n of d.notices) items.push({ order: n.after, rank: 1, sub: n.n, n });
  items.sort((a, b) => a.order - b.order || a.rank - b.rank || (a.sub || 0) - (b.sub || 0));
  for (const p of S.outbox) if (p.circle === name) items.push({ p, status: p.status });

  // The "New" line: above the first post after the marker the circle was opened with that is
  // not the reader's own.
  let newFrom = null;
  if (d.newAfter !== null) {
    for (const [seq, p] of d.posts) {
      if (seq > d.newAfter && p.author !== S.user && !p.event && (newFrom === null || seq < newFrom)) newFrom = seq;
    }
  }
  const children = [];
  const pending = S.outbox.some((p) => p.circle === name);
  const empty = d.posts.size === 0 && !pending;
  if (d.loaded && !d.more) {
    const origin = originText(S.circles.find((c) => c.name === name));
    children.push(extra(`intro\n${name}\n${empty}\n${origin}`, () => introNode(name, empty, origin)));
  }
  let previous = null;
  let lastDay = null;
  for (const item of items) {
    const time = item.p ? postTime(item.p) : item.n.time;
    const day = dayKey(time);
    if (day !== lastDay) {
      const label = dayLabel(time);
      children.push(extra(`day\n${name}\n${day}\n${label}`, () => separatorNode(time)));
      lastDay = day;
      previous = null;
    }
    if (item.n) {
      children.push(extra(`notice\n${name}\n${item.n.n}`, () => noticeNode(item.n)));
      previous = null;
      continue;
    }
    const p = item.p;
    if (p.event) {
      // A system entry: a quiet centred line of its own.
      children.push(extra(`system\n${name}\n${p.seq}\n${systemText(p)}`, () => systemNode(p)));
      previous = null;
      continue;
    }
    if (newFrom !== null && p.seq === newFrom && !item.status) {
      children.push(extra(`new\n${name}\n${p.seq}`, () => {
        const line = el("div", "new-line");
        line.setAttribute("role", "separator");
        line.append(el("span", "", "New"));
        return line;
      }));
      previous = null;
    }
    const node = postNode(p, item.status || "sent");
    const author = p.author || S.user;
    const continued = previous !== null && previous.author === author && time - previous.time < GROUP_GAP_MS && time >= previous.time;
    node.classList.toggle("continued", continued);
    children.push(node);
    previous = { author, time };
  }
  reconcile(list, children);
  rovingFocus();
  if (!d.loading) showOlder("");
  if (S.pinned) $("messages").scrollTop = $("messages").scrollHeight;
  updateJump();
  scheduleMarkRead();
}

/// One tab stop for the whole timeline (the newest post, or the one last focused); Up and Down
/// move between posts, and a focused post shows its actions, so that everything a mouse can do
/// to a post the keyboard can too.
function rovingFocus() {
  const stored = [...$("list").querySelectorAll(".post[data-seq]:not(.deleted)")];
  const chosen = S.roving && S.roving.circle === S.current ? stored.find((node) => node.dataset.seq === S.roving.seq) : null;
  const current = stored.includes(document.activeElement) ? document.activeElement : chosen || stored[stored.length - 1];
  for (const node of stored) node.tabIndex = node === current ? 0 : -1;
  for (const node of $("list").querySelectorAll(".post:not([data-seq]), .post.deleted")) node.removeAttribute("tabindex");
}

$("list").addEventListener("keydown", (event) => {
  const post = event.target;
  if (!post.classList || !post.classList.contains("post") || (event.key !== "ArrowUp" && event.key !== "ArrowDown")) return;
  const stored = [...$("list").querySelectorAll(".post[data-seq]:not(.deleted)")];
  const next = stored[stored.indexOf(post) + (event.key === "ArrowUp" ? -1 : 1)];
  if (!next) return;
  event.preventDefault();
  post.tabIndex = -1;
  next.tabIndex = 0;
  S.roving = next === stored[stored.length - 1] ? null : { circle: S.current, seq: next.dataset.seq };
  next.focus();
});

function renderTyping() {
  const users = S.current && S.typing.has(S.current) ? [...S.typing.get(S.current).keys()].map(displayName) : [];
  const typing = $("typing");
  typing.replaceChildren();
  if (!users.length) return;
  const text = users.length === 1 ? `${users[0]} is typing`
    : users.length === 2 ? `${users[0]} and ${users[1]} are typing`
    : "Several people are typing";
  typing.append(el("span", "dots"), document.createTextNode(text + "…"));
}

// Follow the newest post while the reader is at the bottom, also when images above it finish
// loading or the pane changes size; leave the scroll alone when they have scrolled up.
// Only the reader scrolling up unpins: the browser's own scroll adjustments while content above
// grows (scroll anchoring) move scrollTop down, and must not stop the following.
const box = $("messages");
let lastScrollTop = 0;
box.addEventListener("scroll", () => {
  const top = box.scrollTop;
  if (box.scrollHeight - top - box.clientHeight < 32) S.pinned = true;
  else if (top < lastScrollTop - 1) S.pinned = false;
  lastScrollTop = top;
  updateJump();
  closePicker();
  markRead();
  if (box.scrollTop < 300 && S.current) {
    const d = circleData(S.current);
    if (d.loaded && d.more && !d.loading) loadOlder(S.current, false);
  }
}, { passive: true });
new ResizeObserver(() => { if (S.pinned) box.scrollTop = box.scrollHeight; }).observe($("list"));
new ResizeObserver(() => { if (S.pinned) box.scrollTop = box.scrollHeight; }).observe(box);

function updateJump() {
  $("jump").classList.toggle("hidden", S.pinned || !S.current);
}
$("jump").addEventListener("click", () => {
  S.pinned = true;
  box.scrollTop = box.scrollHeight;
  updateJump();
  $("text").focus();
});

// ---------------------------------------------------------------- posting

const composer = $("text");

function autosize() {
  composer.style.height = "auto";
  composer.style.height = Math.min(composer.scrollHeight, 180) + "px";
}

/// Whether the signed-in person may post in the open circle: not in a read-only one unless
/// they own it or are an admin (the server's rule; its `readOnly` in GET /v1/circles).
function mayPostHere() {
  const info = S.current && S.circles.find((c) => c.name === S.current);
  return !info || !info.readOnly || info.owner === S.user || (S.profile !== null && S.profile.role === "admin");
}

/// The Post button is live only when there is something to post: text, or a chosen photo. In a
/// read-only circle the composer says so and takes nothing.
function updateSend() {
  const box = $("text");  // not `composer`: this runs for the circle list too, which may come first
  const blocked = Boolean(S.current) && !mayPostHere();
  for (const id of ["text", "attach", "photo"]) $(id).disabled = !S.current || blocked;
  box.classList.toggle("read-only", blocked);
  if (blocked) box.placeholder = `${circleTitle(S.current)} is read-only: only its owner and admins post here`;
  else if (S.current && box.placeholder.endsWith("post here")) box.placeholder = `Message ${circleTitle(S.current)}`;
  $("sendbtn").disabled = !S.current || blocked || (!box.value.trim() && !stagedHere());
}

composer.addEventListener("input", () => {
  autosize();
  updateSend();
  updateMentionBox();
  if (!S.current || !S.connected || !S.joined.has(S.current) || Date.now() - S.lastTypingSent < 2500) return;
  S.lastTypingSent = Date.now();
  request({ action: "typing", circle: S.current }).catch(() => {});
});
composer.addEventListener("blur", () => closeMentionBox());
composer.addEventListener("keydown", (event) => {
  if (mentionBox.open && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
    event.preventDefault();
    const count = mentionBox.items.length;
    mentionBox.selected = (mentionBox.selected + (event.key === "ArrowDown" ? 1 : count - 1)) % count;
    updateMentionBox();
  } else if (mentionBox.open && (event.key === "Tab" || (event.key === "Enter" && !event.shiftKey && !event.isComposing))) {
    event.preventDefault();
    acceptMention(mentionBox.items[mentionBox.selected]);
  } else if (mentionBox.open && event.key === "Escape") {
    event.preventDefault();
    closeMentionBox();
  } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    $("compose").requestSubmit();
  } else if (event.key === "ArrowUp" && !composer.value && S.current) {
    // Up in an empty composer edits one's last post, as in Slack and Element.
    const d = circleData(S.current);
    const last = [...d.posts.values()].filter((p) => p.author === S.user && !p.deleted && !p.event).sort((a, b) => b.seq - a.seq)[0];
    if (last) { event.preventDefault(); startEdit(last); }
  } else if (event.key === "Escape" && stagedHere()) {
    event.preventDefault();
    unstagePhoto();
  } else if (event.key === "Escape" && S.replyTo) {
    setReply(null);
  }
});

$("compose").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = composer.value.replace(/^\s*\n|\s+$/g, "");
  const photo = stagedHere() ? S.staged : null;
  if ((!text.trim() && !photo) || !S.current) return;
  const post = { id: uid(), circle: S.current, text: text.trim() ? text : "", author: S.user, status: "sending", created: Date.now() };
  if (S.replyTo && S.replyTo.circle === S.current) post.replyTo = S.replyTo.seq;
  if (photo) {
    // The post takes over the preview's object URL (revoked when it is discarded).
    S.staged = null;
    showStaged();
    Object.assign(post, { status: "uploading", file: photo.file, preview: photo.url, previewSize: photo.size });
  }
  setReply(null);
  S.outbox.push(post);
  composer.value = "";
  autosize();
  updateSend();
  S.pinned = true;
  renderTimeline();
  // While offline a text post is sent on reconnect, with the same id; a photo is uploaded first.
  if (photo) upload(post); else sendPost(post);
});

function sendPost(p) {
  const message = { action: "post", id: p.id, circle: p.circle };
  if (p.text) message.text = p.text;
  if (p.attachment) message.attachment = p.attachment;
  if (p.replyTo) message.replyTo = p.replyTo;
  sendRaw(message);
}

function retryPost(p) {
  p.reason = undefined;
  if (p.file && !p.attachment) {
    upload(p);
    return;
  }
  p.status = "sending";
  renderTimeline();
  sendPost(p);
}

function discardPost(p) {
  S.outbox = S.outbox.filter((q) => q !== p);
  S.nodes.delete(postKey(p));
  if (p.preview) URL.revokeObjectURL(p.preview);
  renderTimeline();
}

// A chosen photo waits above the composer (a thumbnail, its name, ×) until it is posted with
// the composer's text as its caption; nothing is uploaded before that.
$("attach").addEventListener("click", () => $("photo").click());
$("photo").addEventListener("change", () => {
  const file = $("photo").files[0];
  $("photo").value = "";
  if (!file || !S.current) return;
  stagePhoto(file);
});

function stagedHere() {
  return !!(S.staged && S.staged.circle === S.current);
}

function stagePhoto(file) {
  unstagePhoto({ keepFocus: true });
  const staged = { circle: S.current, file, url: URL.createObjectURL(file), size: null };
  S.staged = staged;
  const thumb = $("photothumb");
  thumb.addEventListener("load", () => {
    if (S.staged === staged) staged.size = [thumb.naturalWidth, thumb.naturalHeight];
  }, { once: true });
  thumb.src = staged.url;
  thumb.alt = "The photo to post: " + file.name;
  showStaged();
  composer.focus();
}

/// Takes the chosen photo away without posting it.
function unstagePhoto(options = {}) {
  if (!S.staged) return;
  URL.revokeObjectURL(S.staged.url);
  S.staged = null;
  showStaged();
  if (!options.keepFocus && S.current) composer.focus();
}

function showStaged() {
  const shown = stagedHere();
  $("photobar").classList.toggle("hidden", !shown);
  if (shown) {
    const size = S.staged.file.size;
    const readable = size >= 1048576 ? (size / 1048576).toFixed(1) + " MB" : Math.max(1, Math.round(size / 1024)) + " KB";
    $("photoname").textContent = `${S.staged.file.name} · ${readable}`;
  } else {
    $("photothumb").removeAttribute("src");
    $("photoname").textContent = "";
  }
  composer.placeholder = S.current ? (shown ? "Add a caption (optional)" : `Message #${S.current}`) : composer.placeholder;
  updateSend();
}
$("photocancel").addEventListener("click", () => unstagePhoto());
$("photobar").addEventListener("keydown", (event) => {
  if (event.key === "Escape") { event.preventDefault(); unstagePhoto(); }
});

/// Uploads the photo (POST /v1/media, with progress), then posts it with its media id.
function upload(post) {
  post.status = "uploading";
  post.progress = 0;
  renderTimeline();
  const xhr = new XMLHttpRequest();
  xhr.open("POST", at("/v1/media"));
  for (const [name, value] of Object.entries(authHeaders("POST"))) xhr.setRequestHeader(name, value);
  xhr.setRequestHeader("Content-Type", post.file.type || "application/octet-stream");
  xhr.upload.addEventListener("progress", (event) => {
    if (!event.lengthComputable) return;
    const percent = Math.floor((event.loaded / event.total) * 100);
    if (percent !== post.progress) { post.progress = percent; if (post.circle === S.current) renderTimeline(); }
  });
  const failed = (reason) => {
    post.status = "failed";
    post.reason = reason;
    post.progress = undefined;
    if (post.circle === S.current) renderTimeline();
  };
  xhr.addEventListener("load", () => {
    let body = {};
    try { body = JSON.parse(xhr.responseText); } catch { /* not JSON */ }
    if (xhr.status !== 201 && xhr.status !== 200) {
      failed(body.error ? body.error.message : `the upload failed (${xhr.status})`);
      return;
    }
    post.attachment = body.id;
    if (post.previewSize) rememberPhotoSize(body.id, ...post.previewSize);
    post.file = undefined;
    post.progress = undefined;
    post.status = "sending";
    if (post.circle === S.current) renderTimeline();
    sendPost(post);
  });
  xhr.addEventListener("error", () => failed("the upload was interrupted"));
  xhr.send(post.file);
}

// ---------------------------------------------------------------- edits, deletes, reactions, replies

/// Sends a stored change (edit, delete, react, unreact) with its own request id, so that the
/// server stores it once; what it changes is shown when its entry comes back on the stream.
function sendChange(message) {
  message.id = uid();
  request(message).catch((error) => {
    toast(error.message === "offline" || error.message === "disconnected"
      ? "Not connected: try again once the connection is back." : "Not done: " + error.message);
  });
}

function toggleReaction(p, emoji) {
  closePicker();
  const users = p.reactions && p.reactions.get(emoji);
  const mine = !!(users && users.has(S.user));
  sendChange({ action: mine ? "unreact" : "react", circle: p.circle, target: p.seq, emoji });
}

let toastTimer = null;
function toast(text) {
  const node = $("toast");
  node.textContent = text;
  node.classList.remove("hidden");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => node.classList.add("hidden"), 5000);
}

/// The reaction picker: one row of common emoji next to the button that opened it.
let pickerFor = null;
function openPicker(p, anchor) {
  const picker = $("picker");
  if (pickerFor === postKey(p) && !picker.classList.contains("hidden")) { closePicker(); return; }
  pickerFor = postKey(p);
  const buttons = REACTIONS.map((emoji) => {
    const button = el("button", "pick", emoji);
    button.type = "button";
    button.setAttribute("aria-label", "React with " + emoji);
    const users = p.reactions && p.reactions.get(emoji);
    if (users && users.has(S.user)) button.classList.add("me");
    button.addEventListener("click", (event) => { event.stopPropagation(); closeMenu(); toggleReaction(p, emoji); });
    return button;
  });
  picker.replaceChildren(...buttons);
  picker.classList.remove("hidden");
  const rect = anchor.getBoundingClientRect();
  const width = picker.offsetWidth;
  const height = picker.offsetHeight;
  const left = Math.max(8, Math.min(window.innerWidth - width - 8, rect.right - width));
  const top = rect.top - height - 6 >= 8 ? rect.top - height - 6 : rect.bottom + 6;
  picker.style.left = left + "px";
  picker.style.top = top + "px";
  buttons[0].focus();
}

function closePicker() {
  pickerFor = null;
  $("picker").classList.add("hidden");
}

$("picker").addEventListener("keydown", (event) => {
  if (event.key === "Escape") closePicker();
});
document.addEventListener("click", (event) => {
  if (!$("picker").contains(event.target)) closePicker();
  if (S.menu && !event.target.closest(".post.menu-open")) closeMenu();
});

// Hover affordances follow the pointer actually used: a mouse shows post actions on hover,
// a finger uses the long press.
window.addEventListener("pointermove", (event) => {
  document.documentElement.classList.toggle("mouse", event.pointerType === "mouse");
}, { passive: true });

/// A long press (phones) opens a post's actions; a tap elsewhere closes them.
function addLongPress(node, key) {
  let timer = null;
  let start = null;
  let pressedAt = 0;   // when a long press last opened the menu
  const cancel = () => { clearTimeout(timer); timer = null; };
  node.addEventListener("pointerdown", (event) => {
    // A person's name counts as the post: a touch near it snaps to it (touch adjustment).
    if (event.pointerType === "mouse" || event.target.closest("button:not(.person), a, textarea")) return;
    start = [event.clientX, event.clientY];
    timer = setTimeout(() => { timer = null; pressedAt = Date.now(); openMenu(key); }, LONG_PRESS_MS);
  });
  // The tap that ends a long press on a person's name opens the menu only, not a conversation.
  node.addEventListener("click", (event) => {
    if (Date.now() - pressedAt < 1500 && event.target.closest(".person")) {
      event.stopPropagation();
      event.preventDefault();
      pressedAt = 0;
    }
  }, true);
  node.addEventListener("pointermove", (event) => {
    if (timer && start && Math.hypot(event.clientX - start[0], event.clientY - start[1]) > 10) cancel();
  });
  node.addEventListener("pointerup", cancel);
  node.addEventListener("pointercancel", cancel);
  node.addEventListener("contextmenu", (event) => {
    // A touch's long press, or a right click: the post's own menu instead of the browser's.
    if (!node.dataset.seq || node.classList.contains("deleted") || window.getSelection().toString()) return;
    event.preventDefault();
    cancel();
    openMenu(key);
  });
}

function openMenu(key) {
  const node = S.nodes.get(key);
  if (!node || !node.dataset.seq || node.classList.contains("deleted")) return;
  S.menu = key;
  renderTimeline();
}

function closeMenu() {
  if (!S.menu) return;
  S.menu = null;
  renderTimeline();
}

function setReply(p) {
  S.replyTo = p ? { circle: p.circle, seq: p.seq } : null;
  const bar = $("replybar");
  bar.classList.toggle("hidden", !p);
  if (p) {
    $("replyauthor").textContent = displayName(p.author);
    $("replytext").textContent = snippet(p);
    composer.focus();
  }
}
$("replycancel").addEventListener("click", () => { setReply(null); composer.focus(); });

// ---------------------------------------------------------------- search

/// The snippet of a search hit as nodes: its text, with the words between U+E000 and U+E001 in
/// <mark> (text nodes only: nothing in a post is read as HTML).
function snippetNodes(snippet) {
  const nodes = [];
  for (const [index, part] of snippet.split(/[\uE000\uE001]/).entries()) {
    if (!part) continue;
    nodes.push(index % 2 === 1 ? el("mark", null, part) : document.createTextNode(part));
  }
  return nodes;
}

/// GET /v1/search, every circle the user may read; a button per hit opens the conversation at it.
async function runSearch(q) {
  const box = $("searchresults");
  box.replaceChildren();
  if (!q.trim()) { box.classList.add("hidden"); return; }
  box.classList.remove("hidden");
  const status = el("p", "search-status", "Searching…");
  box.append(status);
  const asked = ++S.searches;
  try {
    const page = await api("/v1/search?" + new URLSearchParams({ q, limit: "20" }));
    if (asked !== S.searches) return;
    status.textContent = page.hits.length ? `${page.hits.length}${page.next ? "+" : ""} found` : "Nothing found.";
    for (const hit of page.hits) {
      const button = el("button", "search-hit");
      button.type = "button";
      button.dataset.circle = hit.circle;
      button.dataset.seq = String(hit.seq);
      button.append(el("span", "search-where", `#${hit.circle} · ${displayName(hit.author)} · ${fullFormat.format(new Date(hit.time))}`), ...snippetNodes(hit.snippet));
      button.addEventListener("click", () => openSearchHit(hit.circle, hit.seq));
      box.append(button);
    }
  } catch (error) {
    if (asked === S.searches) status.textContent = "Search failed: " + error.message;
  }
}

/// Opens `circle` at post `seq`, scrolled to it and marked until another hit is opened.
async function openSearchHit(circle, seq) {
  for (const node of $("list").querySelectorAll(".post.found")) node.classList.remove("found");
  S.found = { circle, seq };
  if (circle !== S.current) await openCircle(circle);
  await scrollToPost(circle, seq);
  if (S.current !== circle) return;
  const node = $("list").querySelector(`.post[data-seq="${seq}"]`);
  if (node) node.classList.add("found");
}

$("searchform").addEventListener("submit", (event) => {
  event.preventDefault();
  runSearch($("searchq").value);
});
$("searchq").addEventListener("keydown", (event) => {
  if (event.key === "Escape") { $("searchq").value = ""; runSearch(""); }
});

/// Shows post `seq` (loading older pages until it is there) and flashes it.
async function scrollToPost(circle, seq) {
  const d = circleData(circle);
  for (let pages = 0; !d.posts.has(seq) && d.more && pages < 40; pages += 1) {
    const before = d.oldest;
    await loadOlder(circle, false);
    if (d.oldest === before) break;
  }
  if (circle !== S.current) return;
  const node = $("list").querySelector(`.post[data-seq="${seq}"]`);
  if (!node) { toast("That post is no longer available."); return; }
  S.pinned = false;
  node.scrollIntoView({ block: "center" });
  updateJump();
  node.classList.remove("flash");
  void node.offsetWidth;
  node.classList.add("flash");
  setTimeout(() => node.classList.remove("flash"), 1600);
}

// ---------------------------------------------------------------- people, account menu, panels

function personAvatar(name) {
  return profileAvatar(S.people.get(name) || { name });
}

/// What of a person a drawn post shows: redrawn when their display name or photo changes.
function personSignature(name) {
  const person = S.people.get(name);
  return person ? (person.displayName || "") + "/" + (person.avatar || "") : "";
}

function button(text, className, onClick) {
  const node = el("button", className, text);
  node.type = "button";
  if (onClick) node.addEventListener("click", onClick);
  return node;
}

/// A labelled field: {row, input}.
function field(label, input, hint) {
  const id = "f" + (++S.counter);
  input.id = id;
  const row = el("div", "field");
  const caption = el("label", undefined, label);
  caption.htmlFor = id;
  if (hint) caption.append(" ", el("span", "hint", hint));
  row.append(caption, input);
  return { row, input };
}

function input(type = "text", attributes = {}) {
  const node = el("input");
  node.type = type;
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, value);
  return node;
}

function errorLine() {
  const node = el("p", "form-error");
  node.setAttribute("role", "alert");
  return node;
}

function statusLine() {
  const node = el("p", "hint");
  node.setAttribute("role", "status");
  return node;
}

function when(ms) {
  return ms ? fullFormat.format(ms) : "never";
}

/// Copies `text`, saying so on `button`.
async function copyText(text, source, control) {
  let done = false;
  try { await navigator.clipboard.writeText(text); done = true; } catch { /* not allowed here */ }
  if (!done && source) {
    source.select();
    try { done = document.execCommand("copy"); } catch { done = false; }
  }
  const before = control.textContent;
  control.textContent = done ? "Copied" : "Select and copy it";
  setTimeout(() => { control.textContent = before; }, 2000);
}

/// A read-only field with a secret or a link, and its Copy button.
function copyRow(label, value, className) {
  const box = input("text", { readonly: "", spellcheck: "false" });
  box.value = value;
  box.className = className || "";
  const { row } = field(label, box);
  const copy = button("Copy", "", () => copyText(value, box, copy));
  const line = el("div", "copy-row");
  line.append(box, copy);
  row.append(line);
  box.addEventListener("focus", () => box.select());
  return row;
}

// The account menu under the signed-in person's avatar.
function openAccountMenu() {
  const menu = $("menu");
  menu.classList.remove("hidden");
  $("mebtn").setAttribute("aria-expanded", "true");
  const rect = $("mebtn").getBoundingClientRect();
  menu.style.left = Math.max(8, rect.left) + "px";
  menu.style.bottom = Math.max(8, window.innerHeight - rect.top + 6) + "px";
  menuItems()[0].focus();
}

function closeAccountMenu(focusButton) {
  if ($("menu").classList.contains("hidden")) return;
  $("menu").classList.add("hidden");
  $("mebtn").setAttribute("aria-expanded", "false");
  if (focusButton) $("mebtn").focus();
}

function menuItems() {
  return [...$("menu").querySelectorAll("li:not(.hidden) button")];
}

$("mebtn").addEventListener("click", (event) => {
  event.stopPropagation();
  if ($("menu").classList.contains("hidden")) openAccountMenu(); else closeAccountMenu(true);
});
$("menu").addEventListener("keydown", (event) => {
  const items = menuItems();
  const at = items.indexOf(document.activeElement);
  if (event.key === "Escape") { event.preventDefault(); closeAccountMenu(true); }
  else if (event.key === "ArrowDown") { event.preventDefault(); items[(at + 1) % items.length].focus(); }
  else if (event.key === "ArrowUp") { event.preventDefault(); items[(at - 1 + items.length) % items.length].focus(); }
  else if (event.key === "Tab") closeAccountMenu(false);
});
$("menu").addEventListener("click", (event) => {
  const item = event.target.closest("button[data-panel]");
  if (!item) return;
  closeAccountMenu(true);   // the panel gives the focus back to the account button
  const panel = item.dataset.panel;
  if (panel === "signout") signOut();
  else if (panel === "profile") openProfile();
  else if (panel === "sessions") openSessions();
  else if (panel === "tokens") openTokens();
  else if (panel === "device") openDeviceApproval(null);
  else if (panel === "push") togglePush();
  else if (panel === "admin") openAdmin();
});
document.addEventListener("click", (event) => {
  if (!$("menu").contains(event.target) && event.target !== $("mebtn")) closeAccountMenu(false);
});

// The panel: one at a time over the page, Esc or × closes it and focus goes back where it was.
let sheetReturn = null;
function openSheet(title, name, ...content) {
  const sheet = $("sheet");
  if (sheet.classList.contains("hidden")) sheetReturn = document.activeElement;
  sheet.dataset.panel = name;
  $("sheettitle").textContent = title;
  $("sheetbody").replaceChildren(...content);
  sheet.classList.remove("hidden");
  const first = $("sheetbody").querySelector("input, select, button, textarea");
  (first || $("sheetclose")).focus();
}

function closeSheet() {
  const sheet = $("sheet");
  if (sheet.classList.contains("hidden")) return;
  sheet.classList.add("hidden");
  delete sheet.dataset.panel;
  $("sheetbody").replaceChildren();
  const back = sheetReturn;
  sheetReturn = null;
  if (back && document.contains(back) && !$("app").classList.contains("hidden")) back.focus();
}
$("sheetclose").addEventListener("click", closeSheet);
$("sheet").addEventListener("click", (event) => { if (event.target === $("sheet")) closeSheet(); });
$("sheet").addEventListener("keydown", (event) => {
  if (event.key === "Escape") { event.preventDefault(); closeSheet(); return; }
  if (event.key !== "Tab") return;
  // Keeps Tab inside the panel.
  const focusable = [...$("sheet").querySelectorAll("button, input, select, textarea, a[href]")].filter((n) => !n.disabled && n.offsetParent !== null);
  if (!focusable.length) return;
  const first = focusable[0], last = focusable[focusable.length - 1];
  if (event.shiftKey && document.activeElement === first) { event.preventDefault(); last.focus(); }
  else if (!event.shiftKey && document.activeElement === last) { event.preventDefault(); first.focus(); }
});

function section(title, ...content) {
  const node = el("section", "sheet-section");
  node.append(el("h3", undefined, title), ...content);
  return node;
}

function smallForm(onSubmit, ...content) {
  const form = el("form", "sheet-form");
  form.noValidate = true;
  form.append(...content);
  form.addEventListener("submit", (event) => { event.preventDefault(); onSubmit(); });
  return form;
}

// ---- profile

function openProfile() {
  const profile = S.profile;
  const display = field("Display name", input("text", { maxlength: "64", autocomplete: "name" }), "(shown instead of your name)");
  display.input.value = profile.displayName || "";
  const displayError = errorLine(), displayDone = statusLine();
  const save = el("button", "primary", "Save");
  save.type = "submit";
  const names = smallForm(async () => {
    displayError.textContent = displayDone.textContent = "";
    try {
      setProfile(await api("/v1/profile", { method: "PATCH", body: JSON.stringify({ displayName: display.input.value.trim() }) }));
      displayDone.textContent = "Saved.";
    } catch (error) { displayError.textContent = error.message; }
  }, el("p", "hint", "You sign in as " + profile.name + "."), display.row, save, displayDone, displayError);

  const face = profileAvatar(profile, "avatar large");
  const file = input("file", { accept: "image/jpeg,image/png,image/gif,image/webp" });
  file.className = "visually-hidden";
  file.tabIndex = -1;
  const photoError = errorLine(), photoDone = statusLine();
  const choose = button("Choose a photo…", "", () => file.click());
  const remove = button("Remove the photo", "", async () => {
    photoError.textContent = photoDone.textContent = "";
    try {
      setProfile(await api("/v1/profile", { method: "PATCH", body: JSON.stringify({ avatar: "" }) }));
      openProfile();
    } catch (error) { photoError.textContent = error.message; }
  });
  remove.classList.toggle("hidden", !profile.avatar);
  file.addEventListener("change", async () => {
    const chosen = file.files[0];
    file.value = "";
    if (!chosen) return;
    photoError.textContent = "";
    photoDone.textContent = "Uploading…";
    try {
      const media = await uploadFile(chosen);
      setProfile(await api("/v1/profile", { method: "PATCH", body: JSON.stringify({ avatar: media.id }) }));
      openProfile();
    } catch (error) {
      photoDone.textContent = "";
      photoError.textContent = error.message;
    }
  });
  const photoRow = el("div", "photo-row");
  photoRow.append(face, choose, remove, file);

  const current = field("Current password", input("password", { autocomplete: "current-password" }),
    passkeysAvailable() ? "(empty when the account was made with a passkey and has none)" : undefined);
  const fresh = field("New password", input("password", { autocomplete: "new-password" }));
  const again = field("New password again", input("password", { autocomplete: "new-password" }));
  const passError = errorLine(), passDone = statusLine();
  const change = el("button", "primary", "Change the password");
  change.type = "submit";
  const password = smallForm(async () => {
    passError.textContent = passDone.textContent = "";
    const mismatch = passwordMismatch(fresh.input.value, again.input.value);
    if (mismatch) { passError.textContent = mismatch; fresh.input.focus(); return; }
    try {
      await api("/v1/auth/password", { method: "POST", body: JSON.stringify({ current: current.input.value, new: fresh.input.value }) });
      for (const f of [current, fresh, again]) f.input.value = "";
      passDone.textContent = "The password is changed.";
    } catch (error) { passError.textContent = error.message; }
  }, current.row, fresh.row, again.row, change, passDone, passError);

  const sections = [section("Name", names), section("Photo", photoRow, photoDone, photoError), section("Password", password)];
  if (passkeysAvailable()) sections.push(passkeySection());
  openSheet("Profile", "profile", ...sections);
}

/// The Profile panel's passkeys: the list (name, added, last used), adding one, removing one.
function passkeySection() {
  const list = el("ul", "rows passkeys");
  const error = errorLine(), done = statusLine();
  const name = field("Name", input("text", { maxlength: "60", placeholder: "laptop" }), "(which device keeps it)");
  const add = el("button", "primary", "Add a passkey");
  add.type = "submit";
  const form = smallForm(async () => {
    error.textContent = done.textContent = "";
    add.disabled = true;
    try {
      const made = await registerPasskey(signedInPost, {}, name.input.value.trim());
      name.input.value = "";
      done.textContent = `The passkey “${made.name}” is added.`;
      await fillPasskeys(list, error, done);
    } catch (failure) {
      error.textContent = passkeyMessage(failure);
    } finally {
      add.disabled = false;
    }
  }, name.row, add);
  fillPasskeys(list, error, done);
  return section("Passkeys", el("p", "hint", "A passkey signs you in with this device's screen lock or a security key, without the password."),
    list, form, done, error);
}

async function fillPasskeys(list, error, done) {
  try {
    const { passkeys } = await api("/v1/auth/passkeys");
    if (!passkeys.length) { list.replaceChildren(el("li", "hint", "No passkeys yet.")); return; }
    list.replaceChildren(...passkeys.map((passkey) => {
      const item = el("li", "row-item");
      item.dataset.id = passkey.id;
      const text = el("div", "row-text");
      text.append(el("strong", undefined, passkey.name),
        el("span", "hint", `added ${when(passkey.createdAt)} · last used ${when(passkey.lastUsedAt)}`));
      const remove = button("Remove", "danger", () => {
        confirmInline(remove, `Remove the passkey “${passkey.name}”?`, "Remove", async () => {
          error.textContent = done.textContent = "";
          try {
            await api("/v1/auth/passkeys/" + encodeURIComponent(passkey.id), { method: "DELETE" });
            done.textContent = `The passkey “${passkey.name}” is removed.`;
            await fillPasskeys(list, error, done);
          } catch (failure) { error.textContent = failure.message; }
        });
      });
      remove.setAttribute("aria-label", `Remove the passkey ${passkey.name}`);
      item.append(text, remove);
      return item;
    }));
  } catch (failure) { error.textContent = failure.message; }
}

// ---- approving a device (circle login --code)

/// With `code` (a #device= link): asks "Sign in the device showing CODE?"; without, asks for
/// the code the device shows.
function openDeviceApproval(code) {
  S.deviceCode = null;
  const error = errorLine(), done = statusLine();
  const typed = field("Code", input("text", { autocomplete: "off", spellcheck: "false", autocapitalize: "characters", placeholder: "WDJB-MJHT", maxlength: "20" }), "(the device shows it)");
  const approve = el("button", "primary", "Approve");
  approve.type = "submit";
  const cancel = button("Cancel", "", closeSheet);
  const buttons = el("div", "row");
  buttons.append(cancel, approve);
  const question = el("p", "device-question", code ? `Sign in the device showing ${code}?` : "");
  const form = smallForm(async () => {
    error.textContent = done.textContent = "";
    const wanted = (code || typed.input.value).trim().toUpperCase();
    if (!wanted) { error.textContent = "Type the code the device shows."; typed.input.focus(); return; }
    approve.disabled = true;
    try {
      await api("/v1/auth/device/approve", { method: "POST", body: JSON.stringify({ code: wanted }) });
      done.textContent = `The device showing ${wanted} is signed in as ${S.user}.`;
      buttons.replaceChildren(button("Done", "primary", closeSheet));
      buttons.firstChild.focus();
      typed.input.disabled = true;
    } catch (failure) {
      error.textContent = failure.code === "invite_invalid" ? `No device is waiting with the code ${wanted}: it is mistyped or expired.` : failure.message;
      approve.disabled = false;
    }
  }, ...(code ? [question] : [typed.row]), el("p", "hint", "Approve only a device you are using yourself: it gets to act as you."), buttons, done, error);
  openSheet("Approve a device", "device", form);
  if (code) approve.focus();
}

function setProfile(profile) {
  S.profile = profile;
  S.people.set(profile.name, profile);
  showMe();
  if (S.current) renderTimeline();
}

/// Uploads a file (POST /v1/media): the media object.
async function uploadFile(file) {
  const response = await fetch(at("/v1/media"), {
    method: "POST",
    headers: { ...authHeaders("POST"), "Content-Type": file.type || "application/octet-stream" },
    body: file,
  });
  const body = await response.json().catch(() => ({}));
  if (!response.ok) throw new APIError(response.status, body.error ? body.error.code : "", body.error ? body.error.message : "the upload failed (" + response.status + ")");
  return body;
}

// ---- sessions and personal tokens

const KIND_TEXT = { page: "Browser", device: "App", personal: "Personal token" };

function sessionItem(session, onEnd, endText) {
  const item = el("li", "row-item");
  item.dataset.id = session.id;
  const text = el("div", "row-text");
  const title = el("strong", undefined, session.label || KIND_TEXT[session.kind] || session.kind);
  text.append(title);
  if (session.current) text.append(" ", el("span", "tag", "this browser"));
  text.append(el("span", "hint", `${KIND_TEXT[session.kind] || session.kind}${session.address ? " · " + session.address : ""} · last used ${when(session.lastUsedAt)} · until ${when(session.expiresAt)}`));
  item.append(text, button(endText, "danger", () => onEnd(session, item)));
  return item;
}

async function openSessions() {
  const list = el("ul", "rows");
  const error = errorLine();
  const everywhere = button("Sign out everywhere", "danger", () => {
    confirmInline(everywhere, "Sign out of every browser and app (personal tokens stay)?", "Sign out everywhere", async () => {
      try {
        await api("/v1/auth/signout-everywhere", { method: "POST" });
        showSignIn("You signed out everywhere.");
      } catch (failure) { error.textContent = failure.message; }
    });
  });
  openSheet("Sessions", "sessions", el("p", "hint", "Where you are signed in. Signing a session out closes its connections at once."), list, error, everywhere);
  try {
    const { sessions } = await api("/v1/auth/sessions");
    list.replaceChildren(...sessions.filter((s) => s.kind !== "personal").map((session) => sessionItem(session, async (ended, item) => {
      if (ended.current) return signOut();
      try {
        await api("/v1/auth/sessions/" + encodeURIComponent(ended.id), { method: "DELETE" });
        item.remove();
      } catch (failure) { error.textContent = failure.message; }
    }, session.current ? "Sign out" : "Sign it out")));
  } catch (failure) { error.textContent = failure.message; }
}

/// Asks "Sure?" next to `anchor` (a button), replacing it until answered.
function confirmInline(anchor, question, yes, action) {
  const box = el("div", "confirm-inline");
  box.setAttribute("role", "group");
  box.append(el("span", undefined, question));
  const ok = button(yes, "danger", async () => { box.replaceWith(anchor); await action(); });
  const cancel = button("Cancel", "", () => { box.replaceWith(anchor); anchor.focus(); });
  box.addEventListener("keydown", (event) => { if (event.key === "Escape") { event.stopPropagation(); cancel.click(); } });
  box.append(ok, cancel);
  anchor.replaceWith(box);
  cancel.focus();
}

async function openTokens() {
  const name = field("Name", input("text", { maxlength: "60", placeholder: "deploy script" }), "(what it is for)");
  const days = field("Valid for (days)", input("number", { min: "1", max: "365", value: "90" }));
  const error = errorLine();
  const shown = el("div", "token-shown");
  const list = el("ul", "rows");
  const create = el("button", "primary", "Create a token");
  create.type = "submit";
  const form = smallForm(async () => {
    error.textContent = "";
    shown.replaceChildren();
    const label = name.input.value.trim();
    if (!label) { error.textContent = "Give the token a name."; name.input.focus(); return; }
    try {
      const made = await api("/v1/auth/tokens", { method: "POST", body: JSON.stringify({ name: label, days: Number(days.input.value) || 90 }) });
      name.input.value = "";
      shown.append(copyRow("Your new token (shown only now: copy it)", made.token, "token-value"));
      shown.querySelector("input").focus();
      await fillTokens(list, error);
    } catch (failure) { error.textContent = failure.message; }
  }, name.row, days.row, create, error);
  openSheet("Personal tokens", "tokens",
    el("p", "hint", "A personal token lets a script or the circle tool act as you: send it as Authorization: Bearer …"),
    form, shown, section("Your tokens", list));
  await fillTokens(list, error);
}

async function fillTokens(list, error) {
  try {
    const { sessions } = await api("/v1/auth/sessions");
    const tokens = sessions.filter((s) => s.kind === "personal");
    list.replaceChildren(...tokens.map((session) => sessionItem(session, async (ended, item) => {
      try {
        await api("/v1/auth/sessions/" + encodeURIComponent(ended.id), { method: "DELETE" });
        item.remove();
      } catch (failure) { error.textContent = failure.message; }
    }, "Revoke")));
    if (!tokens.length) list.append(el("li", "hint", "No personal tokens."));
  } catch (failure) { error.textContent = failure.message; }
}

// ---- admin

async function openAdmin() {
  const users = el("ul", "rows");
  const invites = el("ul", "rows");
  const error = errorLine();
  const hours = field("Valid for (hours)", input("number", { min: "1", max: "720", value: "168" }));
  const uses = field("Uses", input("number", { min: "1", max: "1000", value: "1" }));
  const circles = el("fieldset", "circle-choice");
  circles.append(el("legend", undefined, "Joins the circles"));
  for (const c of S.circles) {
    const label = el("label", "check");
    const box = input("checkbox");
    box.value = c.name;
    label.append(box, " " + (c.private ? "🔒 " : "#") + c.name);
    circles.append(label);
  }
  if (!S.circles.length) circles.append(el("p", "hint", "No circles yet."));
  const made = el("div", "invite-made");
  const inviteError = errorLine();
  const create = el("button", "primary", "Create an invite");
  create.type = "submit";
  const form = smallForm(async () => {
    inviteError.textContent = "";
    made.replaceChildren();
    const chosen = [...circles.querySelectorAll("input:checked")].map((b) => b.value);
    try {
      const invite = await api("/v1/admin/invites", { method: "POST", body: JSON.stringify({ hours: Number(hours.input.value) || 168, uses: Number(uses.input.value) || 1, circles: chosen }) });
      made.append(copyRow("The invite link (shown only now)", invite.url, "invite-url"));
      made.querySelector("input").focus();
      await fillInvites(invites, inviteError);
    } catch (failure) { inviteError.textContent = failure.message; }
  }, hours.row, uses.row, circles, create, inviteError);
  const webhooks = el("ul", "rows webhooks");
  const webhookError = errorLine();
  openSheet("Admin", "admin", section("People", users, error), section("Invite someone", form, made), section("Invites", invites),
    section("Webhooks", webhooks, webhookError));
  await Promise.all([fillUsers(users, error), fillInvites(invites, inviteError), fillWebhooks(webhooks, webhookError)]);
}

/// The webhook subscriptions (docs/API.md, "Webhooks"): state, what they get, their deliveries
/// by state; each opens its newest deliveries, where a failed one can be sent again.
async function fillWebhooks(list, error) {
  try {
    const { webhooks } = await api("/v1/admin/webhooks");
    list.replaceChildren(...webhooks.map((hook) => webhookItem(hook, list, error)));
    if (!webhooks.length) list.append(el("li", "hint", "No webhooks. circle admin webhook add URL subscribes one."));
  } catch (failure) { error.textContent = failure.message; }
}

function webhookItem(hook, list, error) {
  const item = el("li", "row-item webhook");
  item.dataset.id = hook.id;
  item.dataset.status = hook.status;
  const text = el("div", "row-text");
  text.append(el("strong", undefined, hook.url), " ", el("span", "tag" + (hook.status === "active" ? "" : " bad"), hook.status));
  const counts = ["pending", "delivered", "failed"].map((state) => `${hook.deliveries[state] || 0} ${state}`).join(" · ");
  const scope = (hook.circle ? "#" + hook.circle : "every circle") + " · " + hook.events.join(", ") + (hook.bot ? " · bot " + hook.bot : "");
  text.append(el("span", "hint", `${scope} · ${counts}`));
  if (hook.disabledReason) text.append(el("span", "hint webhook-reason", hook.disabledReason));
  const deliveries = el("ul", "rows deliveries hidden");
  const actions = el("div", "row-actions");
  const show = button("Deliveries", "", async () => {
    const opening = deliveries.classList.contains("hidden");
    deliveries.classList.toggle("hidden", !opening);
    if (opening) await fillDeliveries(hook, deliveries, list, error);
  });
  show.setAttribute("aria-label", "Deliveries of " + hook.url);
  const toggle = button(hook.status === "active" ? "Disable" : "Enable", hook.status === "active" ? "" : "primary", async () => {
    error.textContent = "";
    try {
      const updated = await api("/v1/admin/webhooks/" + encodeURIComponent(hook.id), { method: "PATCH", body: JSON.stringify({ enabled: hook.status !== "active" }) });
      item.replaceWith(webhookItem(updated, list, error));
    } catch (failure) { error.textContent = failure.message; }
  });
  actions.append(show, toggle);
  item.append(text, actions, deliveries);
  return item;
}

async function fillDeliveries(hook, target, list, error) {
  try {
    const { deliveries } = await api("/v1/admin/webhooks/" + encodeURIComponent(hook.id) + "/deliveries?limit=20");
    target.replaceChildren(...deliveries.map((delivery) => {
      const row = el("li", "row-item delivery");
      row.dataset.id = delivery.id;
      row.dataset.status = delivery.status;
      const last = delivery.lastError || (delivery.lastStatus ? `answered ${delivery.lastStatus}` : "not tried yet");
      const line = el("div", "row-text");
      line.append(el("span", "tag" + (delivery.status === "failed" ? " bad" : ""), delivery.status), " ",
        `#${delivery.circle}/${delivery.seq} ${delivery.event} · ${delivery.attempts} attempt${delivery.attempts === 1 ? "" : "s"} · ${last}`);
      row.append(line);
      if (delivery.status === "failed") {
        const retry = button("Send again", "", async () => {
          try {
            await api("/v1/admin/webhooks/" + encodeURIComponent(hook.id) + "/deliveries/" + encodeURIComponent(delivery.id) + "/retry", { method: "POST" });
            await fillDeliveries(hook, target, list, error);
          } catch (failure) { error.textContent = failure.message; }
        });
        row.append(retry);
      }
      return row;
    }));
    if (!deliveries.length) target.append(el("li", "hint", "No deliveries yet."));
  } catch (failure) { error.textContent = failure.message; }
}

async function fillUsers(list, error) {
  try {
    const { users } = await api("/v1/admin/users");
    list.replaceChildren(...users.map((user) => userItem(user, list, error)));
  } catch (failure) { error.textContent = failure.message; }
}

function userItem(user, list, error) {
  const item = el("li", "row-item");
  item.dataset.user = user.name;
  item.dataset.status = user.status;
  const text = el("div", "row-text");
  text.append(el("strong", undefined, user.displayName || user.name));
  if (user.displayName) text.append(" ", el("span", "hint", user.name));
  if (user.status !== "active") text.append(" ", el("span", "tag bad", user.status));
  text.append(el("span", "hint", `joined ${when(user.createdAt)} · last seen ${when(user.lastSeenAt)}`));
  const role = el("select", "role");
  role.setAttribute("aria-label", "Role of " + user.name);
  for (const value of ["member", "admin", "bot"]) {
    const option = el("option", undefined, value);
    option.value = value;
    role.append(option);
  }
  role.value = user.role;
  const self = user.name === S.user;
  role.disabled = self;
  const change = async (body) => {
    error.textContent = "";
    try {
      const updated = await api("/v1/admin/users/" + encodeURIComponent(user.name), { method: "PATCH", body: JSON.stringify(body) });
      const fresh = userItem(updated, list, error);
      item.replaceWith(fresh);
      fresh.querySelector("select").focus();
    } catch (failure) {
      error.textContent = failure.message;
      role.value = user.role;
    }
  };
  role.addEventListener("change", () => change({ role: role.value }));
  const actions = el("div", "row-actions");
  actions.append(role);
  if (!self) {
    if (user.status === "active") {
      const deactivate = button("Deactivate", "", () => confirmInline(deactivate, `Deactivate ${user.name}? They are signed out everywhere.`, "Deactivate", () => change({ status: "deactivated" })));
      const ban = button("Ban", "danger", () => confirmInline(ban, `Ban ${user.name}? They are signed out everywhere.`, "Ban", () => change({ status: "banned" })));
      deactivate.setAttribute("aria-label", "Deactivate " + user.name);
      ban.setAttribute("aria-label", "Ban " + user.name);
      actions.append(deactivate, ban);
    } else {
      const reactivate = button("Reactivate", "", () => confirmInline(reactivate, `Let ${user.name} sign in again?`, "Reactivate", () => change({ status: "active" })));
      reactivate.setAttribute("aria-label", "Reactivate " + user.name);
      actions.append(reactivate);
    }
  }
  item.append(text, actions);
  return item;
}

async function fillInvites(list, error) {
  try {
    const { invites } = await api("/v1/admin/invites");
    const now = Date.now();
    list.replaceChildren(...invites.map((invite) => {
      const item = el("li", "row-item");
      item.dataset.id = invite.id;
      const text = el("div", "row-text");
      const state = invite.revoked ? "revoked" : invite.expiresAt <= now ? "expired" : invite.uses >= invite.maxUses ? "used up" : "open";
      text.append(el("strong", undefined, `Invite ${invite.id}`), " ", el("span", "tag" + (state === "open" ? "" : " bad"), state));
      const joins = invite.circles.length ? " · joins " + invite.circles.map((c) => "#" + c).join(", ") : "";
      text.append(el("span", "hint", `by ${invite.createdBy} · used ${invite.uses} of ${invite.maxUses} · until ${when(invite.expiresAt)}${joins}`));
      item.append(text);
      if (state === "open") {
        const revoke = button("Revoke", "danger", () => confirmInline(revoke, "Revoke this invite?", "Revoke", async () => {
          try {
            await api("/v1/admin/invites/" + encodeURIComponent(invite.id), { method: "DELETE" });
            await fillInvites(list, error);
          } catch (failure) { error.textContent = failure.message; }
        }));
        item.append(revoke);
      }
      return item;
    }));
    if (!invites.length) list.append(el("li", "hint", "No invites yet."));
  } catch (failure) { error.textContent = failure.message; }
}

// ---- a circle's members

function mayManage(circle) {
  const info = circleInfo(circle);
  return !!info && (info.owner === S.user || (S.profile && S.profile.role === "admin"));
}

async function openMembers() {
  const circle = S.current;
  if (!circle) return;
  const list = el("ul", "rows");
  const error = errorLine();
  const content = [el("p", "hint", circleInfo(circle) && circleInfo(circle).private
    ? "Only members see this private circle." : "Anyone signed in may read this public circle; members are listed here."), list, error];
  if (mayManage(circle)) {
    const who = field("Add a person", input("text", { list: "peoplelist", autocomplete: "off", spellcheck: "false", placeholder: "name" }), "(people with an account)");
    const add = el("button", "primary", "Add");
    add.type = "submit";
    content.push(smallForm(async () => {
      error.textContent = "";
      const typed = who.input.value.trim();
      if (!typed) { who.input.focus(); return; }
      // A display name typed instead of a name is taken when it names one person.
      const byDisplay = [...S.people.values()].filter((p) => p.displayName && p.displayName.toLowerCase() === typed.toLowerCase());
      const user = S.people.has(typed) || byDisplay.length !== 1 ? typed : byDisplay[0].name;
      try {
        const answer = await api(`/v1/circles/${encodeURIComponent(circle)}/members`, { method: "POST", body: JSON.stringify({ user }) });
        who.input.value = "";
        fillMembers(circle, list, answer.members, error);
        who.input.focus();
      } catch (failure) { error.textContent = failure.message; }
    }, who.row, add));
    // The circle's system entries ("alice added bob") in the conversation: on unless turned off.
    const label = el("label", "check");
    const box = input("checkbox", { id: "systementries" });
    box.checked = !circleInfo(circle) || circleInfo(circle).systemEntries !== false;
    box.addEventListener("change", async () => {
      error.textContent = "";
      try {
        const answer = await api(`/v1/circles/${encodeURIComponent(circle)}/system-entries`, { method: "PUT", body: JSON.stringify({ enabled: box.checked }) });
        const info = circleInfo(circle);
        if (info) info.systemEntries = answer.systemEntries;
        box.checked = answer.systemEntries;
      } catch (failure) {
        box.checked = !box.checked;
        error.textContent = failure.message;
      }
    });
    label.append(box, " Show the circle's start and members added, removed and leaving in the conversation");
    content.push(label);
  }
  openSheet("Members of #" + circle, "members", ...content);
  await loadPeople();   // people who joined since the page loaded can be chosen too
  try {
    const answer = await api(`/v1/circles/${encodeURIComponent(circle)}/members`);
    fillMembers(circle, list, answer.members, error);
  } catch (failure) { error.textContent = failure.message; }
}

function fillMembers(circle, list, members, error) {
  const info = circleInfo(circle);
  list.replaceChildren(...members.map((name) => {
    const item = el("li", "row-item");
    item.dataset.user = name;
    const text = el("div", "row-text");
    const who = el("div", "who");
    who.append(personAvatar(name), el("strong", undefined, displayName(name)));
    if (displayName(name) !== name) who.append(" ", el("span", "hint", name));
    if (info && info.owner === name) who.append(" ", el("span", "tag", "owner"));
    text.append(who);
    item.append(text);
    if (info && info.owner !== name && (mayManage(circle) || name === S.user)) {
      const remove = button(name === S.user ? "Leave" : "Remove", "danger", async () => {
        try {
          const answer = await api(`/v1/circles/${encodeURIComponent(circle)}/members/${encodeURIComponent(name)}`, { method: "DELETE" });
          fillMembers(circle, list, answer.members, error);
        } catch (failure) { error.textContent = failure.message; }
      });
      remove.setAttribute("aria-label", (name === S.user ? "Leave " : "Remove " + name + " from ") + "#" + circle);
      item.append(remove);
    }
    return item;
  }));
}
$("membersbtn").addEventListener("click", openMembers);

// ---------------------------------------------------------------- photo viewer

function openViewer(id, src) {
  $("viewerimg").src = src;
  $("viewerimg").alt = "Photo";
  const open = $("vieweropen");
  open.href = id ? mediaURL(id) : src;
  open.classList.toggle("hidden", !id);
  $("viewer").classList.remove("hidden");
  $("viewerclose").focus();
}

function closeViewer() {
  $("viewer").classList.add("hidden");
  $("viewerimg").removeAttribute("src");
}
$("viewerclose").addEventListener("click", closeViewer);
$("viewer").addEventListener("click", (event) => { if (event.target === $("viewer")) closeViewer(); });
document.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !$("viewer").classList.contains("hidden")) closeViewer();
});

// ---------------------------------------------------------------- phone layout

$("back").addEventListener("click", () => {
  saveView();
  document.body.classList.remove("view-chat");
  document.body.classList.add("view-list");
  // The circle stays the current one (its typing and scroll place are kept), but it is no longer
  // read: its posts count as unread and are not marked read until it is opened again.
  renderCircles();
  const active = document.querySelector(`#circles li[data-name="${CSS.escape(S.current || "")}"] button`);
  if (active) active.focus();
});

// ---------------------------------------------------------------- start

/// Reads a #setup=, #invite=, #device= or #circle= link once and takes it out of the address
/// bar, so a secret does not stay in the history or on the screen. #circle=NAME (a notification's
/// click, docs/PAGE.md) opens that circle once signed in.
function takeFragment() {
  const match = /^#(setup|invite|device|circle)=([^&]+)/.exec(location.hash);
  if (!match) return null;
  history.replaceState(null, "", location.pathname + location.search);
  return { kind: match[1], token: decodeURIComponent(match[2]) };
}

async function start() {
  const link = takeFragment();
  await loadConfig();
  let state = null;
  try {
    const response = await fetch(at("/v1/auth/state"));
    if (response.ok) state = await response.json();
  } catch { /* an older server, or none: the token sign-in still works */ }
  S.setupRequired = !!(state && state.setupRequired);
  S.methods = (state && state.methods) || [];
  if (link && link.kind === "device") S.deviceCode = link.token;
  if (link && link.kind === "circle") S.openAtStart = link.token;
  if (link && link.kind === "setup") {
    S.setupToken = link.token;
    showCard("setupform");
    $("setupname").focus();
    return;
  }
  if (state && state.user && state.csrf) return enterWithSession(state);
  if (link && link.kind === "invite") return showInvite(link.token);
  // A development token of this tab (kept only on --dev servers); one left on another server
  // is checked and refused the same way, then forgotten.
  const kept = sessionStorage.getItem("circle.token");
  if (kept) return signIn(kept, { keep: S.dev });
  showSignIn("");
}

// A link opened in a tab already showing the page changes only the fragment: read it the same way.
window.addEventListener("hashchange", () => {
  const link = takeFragment();
  if (link && link.kind === "circle") {
    if (S.user) openCircle(link.token); else S.openAtStart = link.token;
    return;
  }
  if (link && link.kind === "device") {
    if (S.user) openDeviceApproval(link.token);
    else { S.deviceCode = link.token; showSignIn(""); }
    return;
  }
  if (!link || S.user) return;
  if (link.kind === "setup") {
    S.setupToken = link.token;
    showCard("setupform");
    $("setupname").focus();
  } else {
    showInvite(link.token);
  }
});

// ---------------------------------------------------------------- installable app and notifications

/// The service worker (/assets/sw.js, scope /): registered once signed in, without asking for
/// any permission; notifications are asked for only when "Notify me on this device" is turned on.
const PUSH = { registration: null, subscribed: false, busy: false, badge: -1 };

async function startWorker() {
  if (!("serviceWorker" in navigator)) { showPushSwitch(); return; }
  try {
    PUSH.registration = await navigator.serviceWorker.register(at("/assets/sw.js"), { scope: at("/") });
    const subscription = PUSH.registration.pushManager ? await PUSH.registration.pushManager.getSubscription() : null;
    PUSH.subscribed = !!subscription && Notification.permission === "granted";
  } catch (error) {
    PUSH.registration = null;
    console.warn("the service worker did not register:", error);
  }
  showPushSwitch();
  PUSH.badge = -1;
  renderCircles();
}

/// The worker asks an open page to show a circle (a notification was clicked).
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.addEventListener("message", (event) => {
    const data = event.data || {};
    if (data.type === "open" && data.circle && S.user) openCircle(String(data.circle));
  });
}

function showPushSwitch() {
  const item = $("menupush");
  item.setAttribute("aria-checked", PUSH.subscribed ? "true" : "false");
  item.textContent = PUSH.subscribed ? "Notify me on this device: on" : "Notify me on this device: off";
}

/// The unread total as the app badge (where the browser has one) and to the worker, which
/// counts on from it as pushes come.
function showBadge(total) {
  if (total === PUSH.badge) return;
  PUSH.badge = total;
  if (navigator.setAppBadge) {
    (total ? navigator.setAppBadge(total) : navigator.clearAppBadge()).catch(() => { /* not installed */ });
  }
  const worker = navigator.serviceWorker && navigator.serviceWorker.controller;
  if (worker) worker.postMessage({ type: "unread", total });
}

/// base64url → bytes (the VAPID key for applicationServerKey).
function base64urlBytes(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((text.length + 3) % 4);
  return Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
}

async function togglePush() {
  if (PUSH.busy) return;
  PUSH.busy = true;
  try {
    if (PUSH.subscribed) await disablePush(); else await enablePush();
  } catch (error) {
    toast("Notifications on this device: " + error.message);
  } finally {
    PUSH.busy = false;
    showPushSwitch();
  }
}

/// Turns notifications on for this browser: asks for the permission, subscribes with the
/// server's VAPID key and gives the subscription to the server. Each failure says what failed.
async function enablePush() {
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !("Notification" in window)) {
    throw new Error("this browser cannot receive push notifications");
  }
  const key = await api("/v1/push/key");
  if (!key.enabled || !key.publicKey) throw new Error("this server sends no push notifications");
  const permission = await Notification.requestPermission();
  if (permission !== "granted") throw new Error("the browser's permission was not given (allow notifications for this site in its settings)");
  if (!PUSH.registration) PUSH.registration = await navigator.serviceWorker.register(at("/assets/sw.js"), { scope: at("/") });
  await navigator.serviceWorker.ready;
  // A browser that cannot reach its push service may never answer: given up after 20 s (tests
  // shorten it with sessionStorage "circle.pushTimeout", in ms), and a late subscription is undone.
  const pending = PUSH.registration.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: base64urlBytes(key.publicKey) });
  const limit = Number(sessionStorage.getItem("circle.pushTimeout")) || 20000;
  let timer = null;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve(null), limit); });
  let subscription;
  try {
    subscription = await Promise.race([pending, late]);
  } catch (error) {
    throw new Error("the browser's push service refused to subscribe: " + (error && error.message ? error.message : error));
  } finally {
    clearTimeout(timer);
  }
  if (!subscription) {
    pending.then((s) => s.unsubscribe()).catch(() => {});
    throw new Error(`the browser's push service did not answer in ${Math.round(limit / 1000)} s`);
  }
  try {
    await api("/v1/push/subscriptions", { method: "POST", body: JSON.stringify(subscription.toJSON()) });
  } catch (error) {
    await subscription.unsubscribe().catch(() => {});
    throw new Error("the server did not take the subscription: " + error.message);
  }
  PUSH.subscribed = true;
  toast("Notifications on this device are on.");
}

/// Turns them off: the browser forgets the subscription and the server deletes it.
async function disablePush() {
  const registration = PUSH.registration;
  const subscription = registration && registration.pushManager ? await registration.pushManager.getSubscription() : null;
  PUSH.subscribed = false;
  if (!subscription) return;
  const endpoint = subscription.endpoint;
  await subscription.unsubscribe().catch(() => {});
  try {
    await api(`/v1/push/subscriptions?endpoint=${encodeURIComponent(endpoint)}`, { method: "DELETE" });
  } catch (error) {
    if (!(error instanceof APIError && error.status === 404)) throw new Error("the server did not delete the subscription: " + error.message);
  }
}

start();
