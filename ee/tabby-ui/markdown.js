// A small, safe Markdown renderer (everything is escaped first; only the constructs below
// become HTML) and a code highlighter for the common languages.

export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

const KEYWORDS = new Set(
  (
    "as async await break case catch class const continue def default defer del do elif else enum " +
    "export extends false final finally fn for from func function go if impl import in interface " +
    "is lambda let loop match mod module mut new nil none null package pass pub raise return self " +
    "static struct super switch this throw trait true try type typeof use var void where while with " +
    "yield None True False public private protected override val when object int str bool float"
  ).split(" "),
);

/// Escaped code with <span class="tok-…"> around keywords, strings, comments and numbers.
export function highlight(code, language = "") {
  const hashComments = /^(python|py|ruby|rb|bash|sh|shell|yaml|yml|toml|r|perl)$/i.test(language);
  const pattern = hashComments
    ? /(#[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*')|(\b\d[\d_.]*\b)|([A-Za-z_][A-Za-z0-9_]*)/g
    : /(\/\/[^\n]*|\/\*[\s\S]*?\*\/)|("(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|(\b\d[\d_.]*\b)|([A-Za-z_][A-Za-z0-9_]*)/g;
  let out = "";
  let last = 0;
  for (const match of code.matchAll(pattern)) {
    out += escapeHtml(code.slice(last, match.index));
    const [text, comment, string, number, word] = match;
    if (comment) out += `<span class="tok-comment">${escapeHtml(text)}</span>`;
    else if (string) out += `<span class="tok-string">${escapeHtml(text)}</span>`;
    else if (number) out += `<span class="tok-number">${escapeHtml(text)}</span>`;
    else if (word && KEYWORDS.has(word)) out += `<span class="tok-keyword">${escapeHtml(text)}</span>`;
    else out += escapeHtml(text);
    last = match.index + text.length;
  }
  return out + escapeHtml(code.slice(last));
}

/// The URL if it is http(s), site-relative or a fragment; null for anything else (javascript:,
/// data: …), so no link a document carries can run script.
export function safeUrl(url) {
  const trimmed = String(url ?? "").trim();
  if (/^(https?:\/\/|\/|#)/i.test(trimmed)) return trimmed;
  return null;
}

/// Inline markup of one escaped line: code, bold, italic, links, citations.
function inline(text, options) {
  const codes = [];
  let html = escapeHtml(text).replace(/`([^`]+)`/g, (_, code) => {
    codes.push(`<code>${code}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  html = html
    .replace(/\*\*([^*]+)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^*])\*([^*\s][^*]*)\*/g, "$1<em>$2</em>")
    .replace(/\[\[citation:(\d+)\]\]/g, (_, n) =>
      options.citation ? options.citation(Number(n)) : `<sup>[${n}]</sup>`,
    )
    .replace(/\[([^\]]+)\]\(([^)\s]+)\)/g, (whole, label, url) => {
      const safe = safeUrl(url.replace(/&amp;/g, "&"));
      return safe ? `<a href="${escapeHtml(safe)}" rel="noopener noreferrer">${label}</a>` : whole;
    });
  return html.replace(/\u0000(\d+)\u0000/g, (_, i) => codes[Number(i)]);
}

/// Markdown → HTML. `options.citation(n)` renders a [[citation:n]] marker.
export function renderMarkdown(markdown, options = {}) {
  const lines = String(markdown ?? "").replace(/\r\n/g, "\n").split("\n");
  const out = [];
  let paragraph = [];
  let list = null; // { ordered, items }
  const flushParagraph = () => {
    if (paragraph.length) out.push(`<p>${paragraph.map((l) => inline(l, options)).join("<br>")}</p>`);
    paragraph = [];
  };
  const flushList = () => {
    if (!list) return;
    const tag = list.ordered ? "ol" : "ul";
    out.push(`<${tag}>${list.items.map((i) => `<li>${inline(i, options)}</li>`).join("")}</${tag}>`);
    list = null;
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = line.match(/^\s*```\s*([\w+#.-]*)/);
    if (fence) {
      flushParagraph();
      flushList();
      const language = fence[1] ?? "";
      const body = [];
      i++;
      while (i < lines.length && !/^\s*```\s*$/.test(lines[i])) body.push(lines[i++]);
      out.push(
        `<pre class="code"><div class="code-lang">${escapeHtml(language)}</div><code>${highlight(body.join("\n"), language)}</code></pre>`,
      );
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flushParagraph();
      flushList();
      const level = Math.min(heading[1].length + 2, 6);
      out.push(`<h${level}>${inline(heading[2], options)}</h${level}>`);
      continue;
    }
    const item = line.match(/^\s*(?:([-*+])|(\d+)[.)])\s+(.*)$/);
    if (item) {
      flushParagraph();
      const ordered = !!item[2];
      if (list && list.ordered !== ordered) flushList();
      list ??= { ordered, items: [] };
      list.items.push(item[3]);
      continue;
    }
    const quote = line.match(/^>\s?(.*)$/);
    if (quote) {
      flushParagraph();
      flushList();
      out.push(`<blockquote>${inline(quote[1], options)}</blockquote>`);
      continue;
    }
    if (!line.trim()) {
      flushParagraph();
      flushList();
      continue;
    }
    if (list && /^\s{2,}\S/.test(line)) {
      list.items[list.items.length - 1] += ` ${line.trim()}`;
      continue;
    }
    flushList();
    paragraph.push(line);
  }
  flushParagraph();
  flushList();
  return out.join("\n");
}
