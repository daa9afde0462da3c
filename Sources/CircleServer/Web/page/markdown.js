// A little Markdown for posts, rendered as DOM nodes (never as HTML strings, so a post can
// contain no live markup): ```code blocks```, `code`, **bold**, *italic* / _italic_,
// ~~struck~~, > quotes, [label](https://…) and bare http(s) addresses as links.
// Links go only to http:, https: and mailto: addresses; anything else stays plain text.
"use strict";

(function () {
  const INLINE = new RegExp([
    "(`+)([^`]|[^`][\\s\\S]*?[^`])\\1(?!`)",            // 1, 2: code span
    "\\[([^\\[\\]\\n]{1,300})\\]\\(([^()\\s]{1,2048})\\)", // 3, 4: [label](href)
    "(https?:\\/\\/[^\\s<>\"]+)",                         // 5: bare address
    "(\\*\\*|__)(?=\\S)([\\s\\S]{0,2000}?\\S)\\6",       // 6, 7: bold
    "(\\*|_)(?=[^\\s*_])([^\\n]{0,1000}?[^\\s\\\\])\\8", // 8, 9: italic (one line)
    "~~(?=\\S)([\\s\\S]{0,2000}?\\S)~~",                 // 10: strike-through
  ].join("|"), "g");
  const WORD = /[\p{L}\p{N}]/u;
  const MAX_DEPTH = 4;

  /// The URL when it is safe to link to (http, https, mailto), else null.
  function safeURL(text) {
    let url;
    try { url = new URL(text); } catch { return null; }
    return url.protocol === "http:" || url.protocol === "https:" || url.protocol === "mailto:" ? url.href : null;
  }

  /// A bare address without the punctuation that usually ends the sentence around it.
  function trimAddress(address) {
    let end = address.length;
    for (;;) {
      const last = address[end - 1];
      if (".,;:!?'*_~".includes(last)) { end -= 1; continue; }
      if (last === ")") {
        const head = address.slice(0, end);
        if ((head.match(/\(/g) || []).length < (head.match(/\)/g) || []).length) { end -= 1; continue; }
      }
      break;
    }
    return address.slice(0, end);
  }

  function link(href, parent, label, depth) {
    const a = document.createElement("a");
    a.href = href;
    a.target = "_blank";
    a.rel = "noopener noreferrer nofollow";
    if (label === null) a.textContent = href === "" ? "" : decodeForDisplay(href);
    else inline(label, a, depth + 1, false);
    parent.appendChild(a);
  }

  function decodeForDisplay(href) {
    try { return decodeURI(href); } catch { return href; }
  }

  function wrap(tag, content, parent, depth, links) {
    const el = document.createElement(tag);
    inline(content, el, depth + 1, links);
    parent.appendChild(el);
  }

  /// Appends `text` with its inline formatting to `parent`.
  function inline(text, parent, depth, links) {
    if (depth > MAX_DEPTH) { parent.appendChild(document.createTextNode(text)); return; }
    const re = new RegExp(INLINE.source, "gu");
    let pos = 0;
    let m;
    const emit = (upTo) => { if (upTo > pos) parent.appendChild(document.createTextNode(text.slice(pos, upTo))); };
    while ((m = re.exec(text)) !== null) {
      const start = m.index;
      if (m[1] !== undefined) {
        emit(start);
        const code = document.createElement("code");
        code.textContent = m[2].length > 2 && m[2].startsWith(" ") && m[2].endsWith(" ") ? m[2].slice(1, -1) : m[2];
        parent.appendChild(code);
      } else if (m[3] !== undefined) {
        const href = links ? safeURL(m[4]) : null;
        if (href === null) { re.lastIndex = start + 1; continue; }   // stays text, as typed
        emit(start);
        link(href, parent, m[3], depth);
      } else if (m[5] !== undefined) {
        const address = trimAddress(m[5]);
        const href = links ? safeURL(address) : null;
        if (href === null) { re.lastIndex = start + Math.max(1, address.length); continue; }
        emit(start);
        const a = document.createElement("a");
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer nofollow";
        a.textContent = address;
        parent.appendChild(a);
        re.lastIndex = start + address.length;
      } else {
        const delimiter = m[6] || m[8] || "";
        const end = re.lastIndex;
        // Underscores inside words (snake_case) are not emphasis.
        if (delimiter.startsWith("_") && ((start > 0 && WORD.test(text[start - 1])) || (end < text.length && WORD.test(text[end])))) {
          re.lastIndex = start + 1;
          continue;
        }
        emit(start);
        if (m[6] !== undefined) wrap("strong", m[7], parent, depth, links);
        else if (m[8] !== undefined) wrap("em", m[9], parent, depth, links);
        else wrap("del", m[10], parent, depth, links);
      }
      pos = re.lastIndex;
    }
    emit(text.length);
  }

  /// The post's text as a fragment of DOM nodes.
  function render(text) {
    const fragment = document.createDocumentFragment();
    const lines = text.split("\n");
    let paragraph = [];
    let quote = [];
    const flushParagraph = () => {
      if (!paragraph.length) return;
      const p = document.createElement("p");
      inline(paragraph.join("\n"), p, 0, true);
      fragment.appendChild(p);
      paragraph = [];
    };
    const flushQuote = () => {
      if (!quote.length) return;
      const q = document.createElement("blockquote");
      inline(quote.join("\n"), q, 0, true);
      fragment.appendChild(q);
      quote = [];
    };
    for (let i = 0; i < lines.length; i++) {
      const line = lines[i];
      const single = /^\s*```(.+?)```\s*$/.exec(line);
      const fence = /^\s*```[\w+-]*\s*$/.test(line);
      if (single || fence) {
        flushParagraph(); flushQuote();
        const body = [];
        if (single) {
          body.push(single[1]);
        } else {
          let j = i + 1;
          while (j < lines.length && !/^\s*```\s*$/.test(lines[j])) { body.push(lines[j]); j++; }
          i = j;
        }
        const pre = document.createElement("pre");
        const code = document.createElement("code");
        code.textContent = body.join("\n");
        pre.appendChild(code);
        fragment.appendChild(pre);
        continue;
      }
      const quoted = /^>\s?(.*)$/.exec(line);
      if (quoted) { flushParagraph(); quote.push(quoted[1]); continue; }
      flushQuote();
      paragraph.push(line);
    }
    flushParagraph(); flushQuote();
    return fragment;
  }

  window.CircleMarkdown = { render, safeURL };
})();
