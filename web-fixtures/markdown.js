// Answers as Markdown: parsed by marked, made safe by DOMPurify (a model's `<script>` or
// `onerror` never runs, its images are not fetched), code highlighted by highlight.js with a
// copy button. While an answer streams its source grows and the node is re-rendered at most
// once a frame.

import { marked } from "./vendor/marked.js";
import DOMPurify from "./vendor/purify.js";
import hljs from "./vendor/highlight.js";

const sources = new WeakMap();
const pending = new Set();
/// Never drawn from a model's text: images (a URL the model writes is a way to send what it
/// read to anyone: generated media comes as assets instead), forms, styles and frames.
const FORBIDDEN = ["img", "picture", "video", "audio", "source", "form", "input", "button", "style", "iframe"];
let around = { before: () => undefined, after: () => {} };

/// Runs `before()` ahead of each render and `after(node, itsResult)` once it is drawn (the
/// page keeps following the bottom across a render this way).
export function aroundRender(before, after) {
  around = { before, after };
}

/// Shows `source` as Markdown in `node`.
export function setMarkdown(node, source) {
  sources.set(node, source);
  schedule(node);
}

/// Adds streamed `text` to `node`'s Markdown.
export function appendMarkdown(node, text) {
  sources.set(node, (sources.get(node) ?? "") + text);
  schedule(node);
}

/// The Markdown source `node` shows.
export function markdownOf(node) {
  return sources.get(node) ?? "";
}

function schedule(node) {
  if (pending.has(node)) return;
  pending.add(node);
  const run = () => { pending.delete(node); render(node); };
  // Hidden pages get no animation frames; render there on a timer.
  if (document.hidden) setTimeout(run, 50); else requestAnimationFrame(run);
}

function render(node) {
  const token = around.before();
  const html = marked.parse(sources.get(node) ?? "", { gfm: true, breaks: true, async: false });
  node.innerHTML = DOMPurify.sanitize(html, { FORBID_TAGS: FORBIDDEN }).trim();
  for (const link of node.querySelectorAll("a[href]")) {
    link.target = "_blank";
    link.rel = "noopener noreferrer";
  }
  for (const code of node.querySelectorAll("pre > code")) decorate(code);
  around.after(node, token);
}

/// Highlights `code` (a `<code>` element) as `language` when highlight.js knows it.
export function highlight(code, language) {
  if (!language || !hljs.getLanguage(language)) return;
  code.innerHTML = hljs.highlight(code.textContent, { language, ignoreIllegals: true }).value;
  code.classList.add("hljs");
}

/// Highlights a code block and gives it a copy button.
function decorate(code) {
  const source = code.textContent;
  highlight(code, [...code.classList].find((c) => c.startsWith("language-"))?.slice(9));
  const copy = document.createElement("button");
  copy.type = "button";
  copy.className = "copy-code";
  copy.textContent = "Copy";
  copy.setAttribute("aria-label", "Copy the code");
  copy.onclick = async () => {
    try {
      await navigator.clipboard.writeText(source);
      copy.textContent = "Copied";
    } catch {
      copy.textContent = "Copy failed";
    }
    setTimeout(() => { copy.textContent = "Copy"; }, 1500);
  };
  code.parentElement.classList.add("code-block");
  code.parentElement.tabIndex = 0;
  code.parentElement.prepend(copy);
}
