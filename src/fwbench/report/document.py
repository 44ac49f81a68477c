"""A report as a list of blocks (headings, paragraphs, lists, tables, figures) and its
two serialisations, Markdown and self-contained HTML. Both come from the same blocks,
so the numbers in report.md and report.html are the same strings.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field

from fwbench.report.figures import Figure


@dataclass
class Heading:
    level: int
    text: str
    id: str | None = None


@dataclass
class Para:
    text: str
    kind: str = ""          # "", "note", "conclusion"


@dataclass
class Bullets:
    items: list[str]
    kind: str = ""          # "", "warning"


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str = ""
    id: str | None = None
    kind: str = ""          # "pvalues": seed 000's shape; "wrap": long text cells wrap
    row_classes: list[str] = field(default_factory=list)
    # A cell's text may hold one "\n": in HTML its second line is set smaller below the
    # first (a median above its interval), in Markdown the two share a line.


@dataclass
class FigureBlock:
    figure: Figure
    file: str               # the SVG beside report.md, for Markdown


@dataclass
class Details:
    """Blocks shown folded under a one-line summary (<details>, no script needed):
    long tables a reader opens when asked, not scrolls past."""
    summary: str
    blocks: list


Block = Heading | Para | Bullets | Table | FigureBlock | Details


def _md_cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def markdown(blocks: list[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        if isinstance(b, Heading):
            out.append(f"{'#' * b.level} {b.text}")
        elif isinstance(b, Para):
            out.append(f"**{b.text}**" if b.kind == "conclusion" else b.text)
        elif isinstance(b, Bullets):
            out.append("\n".join(f"- {i}" for i in b.items))
        elif isinstance(b, Table):
            lines = []
            if b.caption:
                lines.append(f"*{b.caption}*")
                lines.append("")
            lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            lines.append("|" + "|".join("---" if i == 0 else "---:"
                                        for i in range(len(b.header))) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            out.append("\n".join(lines))
        elif isinstance(b, FigureBlock):
            out.append(f"![{b.figure.title}]({b.file})\n\n*{b.figure.caption}*")
        elif isinstance(b, Details):
            out.append(f"<details><summary>{html.escape(b.summary)}</summary>\n\n"
                       f"{markdown(b.blocks)}\n</details>")
    return "\n\n".join(out) + "\n"


CSS = """
body{font:14px/1.45 system-ui,-apple-system,"DejaVu Sans",sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#1d1d1f}
h1{font-size:1.6em}h2{margin-top:2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-variant-numeric:tabular-nums;
font-size:13px}
th,td{border:1px solid #ccc;padding:.25em .5em;text-align:right;white-space:nowrap}
th:first-child,td:first-child{text-align:left}
table.kv td,table.wrap td{text-align:left;white-space:normal}
td .sub{color:#555;font-size:.85em}
table.pairs td:nth-child(-n+2),table.pairs td:last-child,table.pairs th:nth-child(-n+2),
table.pairs th:last-child{text-align:left}
tr.verdict-diff td:last-child{font-weight:600}
p.caption{font-style:italic;margin:1em 0 .3em}
tr.pvalue td{background:#f6f6f6}tr.holm td{background:#eef4ff;font-weight:600}
p.conclusion{background:#eef7ee;border-left:4px solid #3a3;padding:.4em .8em}
p.note{color:#555}ul.warning li{color:#8a4b00}
figure{margin:1em 0 2em}figure img{display:block;max-width:100%;height:auto}
figcaption{color:#555;font-size:.9em}
details{margin:.6em 0 1.2em}summary{cursor:pointer;color:#225}
"""


def _html_cell(text: str) -> str:
    first, sep, rest = text.partition("\n")
    if not sep:
        return html.escape(text)
    return f'{html.escape(first)}<br><span class="sub">{html.escape(rest)}</span>'


def _html_block(b: Block) -> str:
    e = html.escape
    if isinstance(b, Heading):
        ident = f' id="{e(b.id)}"' if b.id else ""
        return f"<h{b.level}{ident}>{e(b.text)}</h{b.level}>"
    if isinstance(b, Para):
        cls = f' class="{b.kind}"' if b.kind else ""
        return f"<p{cls}>{e(b.text)}</p>"
    if isinstance(b, Bullets):
        cls = f' class="{b.kind}"' if b.kind else ""
        return f"<ul{cls}>" + "".join(f"<li>{e(i)}</li>" for i in b.items) + "</ul>"
    if isinstance(b, Table):
        ident = f' id="{e(b.id)}"' if b.id else ""
        cls = f' class="{b.kind}"' if b.kind else ""
        head = "".join(f"<th>{e(h)}</th>" for h in b.header)
        body = []
        for i, row in enumerate(b.rows):
            rc = b.row_classes[i] if i < len(b.row_classes) else ""
            tr = f'<tr class="{rc}">' if rc else "<tr>"
            body.append(tr + "".join(f"<td>{_html_cell(c)}</td>" for c in row) + "</tr>")
        # The caption as a paragraph above, not <caption>: that is as wide as its table,
        # which squeezes a narrow table's caption into a column.
        cap = f'<p class="caption">{e(b.caption)}</p>' if b.caption else ""
        return (f"{cap}<table{ident}{cls}><thead><tr>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>")
    if isinstance(b, FigureBlock):
        f = b.figure
        return (f'<figure id="{e(f.id)}"><img src="{f.data_uri}" alt="{e(f.title)}">'
                f"<figcaption>{e(f.title)}. {e(f.caption)}</figcaption></figure>")
    if isinstance(b, Details):
        return (f"<details><summary>{e(b.summary)}</summary>"
                + "\n".join(_html_block(x) for x in b.blocks) + "</details>")
    raise TypeError(f"not a block: {b!r}")


def to_html(title: str, blocks: list[Block]) -> str:
    body = "\n".join(_html_block(b) for b in blocks)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{CSS}</style></head>"
            f"<body>\n{body}\n</body></html>\n")
