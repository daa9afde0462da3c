// Circle's service worker (docs/PAGE.md, "Installable app and notifications"): shows a
// notification for each push the server sends (the JSON of docs/API.md, "Push notifications"),
// opens the circle when one is clicked, and keeps the app badge at the unread total.
// Served as assets/sw.js under the page (/ or a mount path such as /chat/) with
// Service-Worker-Allowed: ../ and registered with the page's scope; every URL here is relative
// to that scope, so nothing leaves the mount path.
"use strict";

const BADGE_CACHE = "circle-badge";
const BADGE_KEY = new URL("badge-count", self.location.href).href;

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

/// The notification for one push payload: {kind, circle, seq, author?, text?, direct?}.
/// Without author and text (the server's content-free mode) the text is generic.
function notificationFor(payload) {
  const circle = String(payload.circle || "");
  const author = payload.author ? String(payload.author) : "";
  const title = payload.direct
    ? (author || "Direct message")
    : (author ? `#${circle} · ${author}` : `#${circle}`);
  let body = payload.text ? String(payload.text) : "";
  if (!body) body = payload.kind === "mention" ? "You were mentioned" : "New message";
  return {
    title,
    options: {
      body,
      // One notification per circle: the newest replaces the older ones.
      tag: "circle:" + circle,
      renotify: true,
      icon: new URL("icon.svg", self.location.href).href,
      data: { circle, seq: Number(payload.seq) || 0 },
    },
  };
}

/// The unread total: the page tells it (message "unread"); each push adds one until it does again.
async function readBadge() {
  try {
    const cache = await caches.open(BADGE_CACHE);
    const stored = await cache.match(BADGE_KEY);
    return stored ? Number(await stored.text()) || 0 : 0;
  } catch {
    return 0;
  }
}

async function setBadge(count) {
  try {
    const cache = await caches.open(BADGE_CACHE);
    await cache.put(BADGE_KEY, new Response(String(count)));
  } catch { /* the count is only a hint */ }
  if (self.navigator.setAppBadge) {
    try {
      if (count > 0) await self.navigator.setAppBadge(count); else await self.navigator.clearAppBadge();
    } catch { /* not installed, or no badge on this system */ }
  }
}

self.addEventListener("push", (event) => {
  let payload = {};
  try {
    payload = event.data ? event.data.json() : {};
  } catch {
    payload = {};
  }
  const { title, options } = notificationFor(payload);
  event.waitUntil((async () => {
    await self.registration.showNotification(title, options);
    await setBadge((await readBadge()) + 1);
  })());
});

self.addEventListener("notificationclick", (event) => {
  const notification = event.notification;
  const circle = (notification.data && notification.data.circle) || "";
  notification.close();
  event.waitUntil((async () => {
    const url = new URL(self.registration.scope);
    if (circle) url.hash = "circle=" + encodeURIComponent(circle);
    const windows = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
    const open = windows.find((client) => client.url.startsWith(self.registration.scope));
    if (open) {
      // The page opens the circle itself (it is signed in, its list is loaded).
      open.postMessage({ type: "open", circle });
      await open.focus();
      return;
    }
    await self.clients.openWindow(url.href);
  })());
});

self.addEventListener("message", (event) => {
  const data = event.data || {};
  if (data.type === "unread" && Number.isFinite(data.total)) event.waitUntil(setBadge(Math.max(0, data.total)));
});
