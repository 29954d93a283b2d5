// `node --test` tests of the page's Markdown renderer, chock/serve/static/markdown.js (run by
// tests/test_page_markdown.py). Nothing newer than Node 18. Every input is what a model may write: adversarial
// ones must cost time linear in their length.
import assert from "node:assert/strict";
import test from "node:test";

import { markdown } from "../../chock/serve/static/markdown.js";
import { install } from "./dom.mjs";

install();
const render = (text) => markdown(text).html;

const A = (href, text, kind = "") =>
  `<a href="${href}" rel="noopener noreferrer" target="_blank" referrerPolicy="no-referrer" class="${kind}">${text}</a>`;

const RENDERED = [
  ["# Title #", "<h3>Title</h3>"],
  ["Some **bold** and *em* and _em_ and `code` and ~~del~~.",
    "<p>Some <strong>bold</strong> and <em>em</em> and <em>em</em> and <code>code</code> and <del>del</del>.</p>"],
  ["a `` b ` c `` d", "<p>a <code>b ` c</code> d</p>"],
  ["[link](https://example.com/a_(b)) and [bad](javascript:alert(1))",
    `<p>${A("https://example.com/a_(b)", "link")} and <span class="not-a-link" title="javascript:alert(1)">bad</span></p>`],
  ["![alt](https://x.test/i.png)", `<p>${A("https://x.test/i.png", "image: alt", "image-link")}</p>`],
  ["<https://example.com> and https://example.com/x.",
    `<p>${A("https://example.com/", "https://example.com")} and ${A("https://example.com/x", "https://example.com/x")}.</p>`],
  ["- one\n- two\n  - nested\n\n1. a\n2. b",
    "<ul><li><p>one</p></li><li><p>two</p><ul><li><p>nested</p></li></ul></li></ul><ol><li><p>a</p></li><li><p>b</p></li></ol>"],
  ["3. three", '<ol start="3"><li><p>three</p></li></ol>'],
  ["> quoted\n> **more**", "<blockquote><p>quoted\n<strong>more</strong></p></blockquote>"],
  ["```py\nprint('<b>')\n```", '<pre class="code"><code data-lang="py">print(\'&lt;b&gt;\')</code></pre>'],
  ["| a | b |\n|:-|-:|\n| 1 | 2 |",
    '<div class="table"><table><thead><tr><th>a</th><th class="align-right">b</th></tr></thead>'
    + '<tbody><tr><td>1</td><td class="align-right">2</td></tr></tbody></table></div>'],
  ["---", "<hr></hr>"],
  ["<img src=x onerror=alert(1)>", "<p>&lt;img src=x onerror=alert(1)&gt;</p>"],
  ["snake_case_word and __strong__", "<p>snake_case_word and <strong>strong</strong></p>"],
  ["\\*not em\\*", "<p>*not em*</p>"],
  ["[a [b] c](http://x.test)", `<p>${A("http://x.test/", "a [b] c")}</p>`],
  ["**unclosed and *half", "<p>**unclosed and *half</p>"],
  ["`unclosed code and _half and [half", "<p>`unclosed code and _half and [half</p>"],
  ["``a` b", "<p>``a` b</p>"],
  ["line1\nline2", "<p>line1\nline2</p>"],
];

test("renders what it rendered before", () => {
  for (const [text, html] of RENDERED) assert.equal(render(text), html, `rendering ${JSON.stringify(text)}`);
});

// What it got wrong before (issue 24): 11 of these failed against the renderer before; the other two guard what
// must stay so (an entity in code is code, a definition in a fence is code).
const FIXED = [
  ["Title\n=====\n\nSub\n---\nafter", "<h3>Title</h3><h4>Sub</h4><p>after</p>"],
  ["two lines\nof a title\n===", "<h3>two lines\nof a title</h3>"],
  ["a &lt; b &amp;&amp; c &gt; d &#169; &#x2014; &#0; &bogus;", "<p>a &lt; b &amp;&amp; c &gt; d © — \ufffd &amp;bogus;</p>"],
  ["`&lt;` stays in code", "<p><code>&amp;lt;</code> stays in code</p>"],
  ["&lt;img src=x onerror=alert(1)&gt;", "<p>&lt;img src=x onerror=alert(1)&gt;</p>"],
  ["***x*** and ***two words***", "<p><em><strong>x</strong></em> and <em><strong>two words</strong></em></p>"],
  ["- [ ] to do\n- [x] done\n- [X] also",
    '<ul><li class="task"><span class="check" title="to do">☐</span><p>to do</p></li>'
    + '<li class="task"><span class="check done" title="done">☑</span><p>done</p></li>'
    + '<li class="task"><span class="check done" title="done">☑</span><p>also</p></li></ul>'],
  ["[the docs][Docs], [docs][] and [docs]; [unknown]\n\n[docs]: https://docs.test/a \"Title\"",
    `<p>${A("https://docs.test/a", "the docs")}, ${A("https://docs.test/a", "docs")} and ${A("https://docs.test/a", "docs")}; [unknown]</p>`],
  ["[run][x]\n\n[x]: javascript:alert(1)", '<p><span class="not-a-link" title="javascript:alert(1)">run</span></p>'],
  ["```\n[x]: https://in.code\n```\n[x]", '<pre class="code"><code>[x]: https://in.code</code></pre><p>[x]</p>'],
  ["1. one\n  - nested under it\n2. two",
    "<ol><li><p>one</p><ul><li><p>nested under it</p></li></ul></li><li><p>two</p></li></ol>"],
  ["- a\n\t- tab nested\n - sibling", "<ul><li><p>a</p><ul><li><p>tab nested</p></li></ul></li><li><p>sibling</p></li></ul>"],
  ["```a `` b``` and ``x ` y``", "<p><code>a `` b</code> and <code>x ` y</code></p>"],
];

test("renders setext headings, entities, ***x***, task lists, reference links, nested lists, code spans with backticks", () => {
  for (const [text, html] of FIXED) assert.equal(render(text), html, `rendering ${JSON.stringify(text)}`);
});

// Each adversarial text against plain text of the same length rendered in the same run: a renderer that goes
// back over the rest of the line at each delimiter takes thousands of times as long on these.
const SIZE = 120_000;
const fill = (unit) => unit.repeat(Math.ceil(SIZE / unit.length)).slice(0, SIZE);
const ADVERSARIAL = {
  "unclosed strong": fill("**a "),
  "unclosed emphasis": fill("*a "),
  "unclosed underscores": fill("_a "),
  "unclosed backticks": fill("`a "),
  "unclosed brackets": fill("[a "),
  "nested brackets": fill("[[a]("),
  "bracket pairs": fill("[a]"),
  "quote markers on one line": fill("> "),
  "item markers on one line": fill("- "),
  "60 K nested quotes": "> ".repeat(60_000) + "x",
  "60 K quote lines": "> x\n".repeat(60_000),
  "60 K nested items": "- ".repeat(60_000) + "x",
  "60 K item lines": "- x\n".repeat(60_000),
  "reference-like brackets": fill("[a][b] [c][ "),
  "unclosed entities": fill("&#1 &lt"),
  "unclosed strong emphasis": fill("***a "),
  "60 K definitions": "[a]: https://x.test\n".repeat(60_000) + "[a]",
  "60 K setext lines": "a\n=\n".repeat(60_000),
  "spaces under a table's head": "a|b\n" + " ".repeat(SIZE) + "x",
  "spaces after a table's rule": "a|b\n|---" + " ".repeat(SIZE) + "x",
  "spaces in a link's address": "[a](" + " ".repeat(SIZE) + "x",
};

function took(text) {
  const began = process.hrtime.bigint();
  const html = render(text);
  return [Number(process.hrtime.bigint() - began) / 1e6, html];
}

test("adversarial text renders in time linear in its length", () => {
  render(fill("plain words ")); // warm the engine up
  const [plain] = took(fill("plain words "));
  for (const [name, text] of Object.entries(ADVERSARIAL)) {
    const [ms, html] = took(text);
    assert.ok(html.length > 0, name);
    const bound = 100 * plain + 1500; // generous: a quadratic renderer takes tens of seconds here
    assert.ok(ms <= bound, `${name}: ${ms.toFixed(0)} ms for ${text.length} characters (plain text: ${plain.toFixed(0)} ms)`);
  }
});

test("unclosed delimiters are the text they are", () => {
  for (const unit of ["**a ", "*a ", "_a ", "[a ", "~~a "]) {
    const text = unit.repeat(1000);
    const html = render(text);
    assert.equal(html, `<p>${text.trim()}</p>`, `${JSON.stringify(unit)} repeated`);
  }
});

test("nesting past the bound is shown as text, not a stack overflow", () => {
  assert.match(render("> ".repeat(60_000) + "x"), /^<blockquote>/);
  assert.match(render("- ".repeat(60_000) + "x"), /^<ul>/);
  assert.ok(render("*".repeat(60_000) + "x" + "*".repeat(60_000)).length > 0);
});
