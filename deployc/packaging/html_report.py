"""The build report people look at: one self-contained HTML file (`deployc build --report`, `deployc report`).

Everything is inline: the styles, and charts drawn here as SVG (no script, no font, no image, no request
to any server), so the file opens the same offline, in a mail attachment or a CI artifact. Per target:
the units table, each program's bytes by kind (stacked bars), accuracy against size of every candidate
of a program whose scheme was chosen by measurement (the chosen one marked), time per operator where
the programs were profiled, and the pipeline graph.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any

from deployc.core.sizes import format_size

KIND_COLOURS = {"quantized_weights": "#2b6cb0", "float_weights": "#dd6b20", "scales": "#38a169", "other": "#a0aec0"}
KIND_WORDS = {"quantized_weights": "quantized weights", "float_weights": "float weights", "scales": "scales",
              "other": "code, plans, metadata"}
STATUS_COLOURS = {"chosen": "#2f855a", "passed": "#3182ce", "failed": "#c53030", "not-tried": "#a0aec0"}


@dataclass
class ProgramRow:
    model: str
    unit: str
    backend: str
    quantization: str
    status: str  # built, cached, failed, packaged
    size_bytes: int
    planned_bytes: int
    verification: str  # in words, as the table says it
    latency_ms: float | None = None
    bytes_by_kind: dict[str, int] = field(default_factory=dict)
    chosen_by: str = ""
    candidates: list[dict[str, Any]] = field(default_factory=list)  # scheme, status, size_bytes, min_sqnr_db, ...
    operators: list[dict[str, Any]] = field(default_factory=list)  # name, kind, median_ms, share (profiled)
    profiled_on: str = ""
    failure: str = ""


@dataclass
class TargetSection:
    target: str
    device: dict[str, str]
    bundle: str  # where its bundle is, or why there is none
    programs: list[ProgramRow]
    pipeline: dict[str, Any] | None = None  # the runtime config's pipeline section


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _units_table(rows: list[ProgramRow]) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("model", "unit", "quantization", "status", "size", "planned memory",
                                               "verification", "host latency"))
    body = []
    for r in rows:
        quant = f"{r.quantization} (chosen by {r.chosen_by})" if r.chosen_by else r.quantization
        status = f'<span class="{_e(r.status)}">{_e(r.status)}</span>'
        latency = f"{r.latency_ms:.2f} ms" if r.latency_ms is not None else "-"
        verification = _e(r.verification) + (f'<div class="failure">{_e(r.failure)}</div>' if r.failure else "")
        body.append(f"<tr><td>{_e(r.model)}</td><td>{_e(r.unit)} ({_e(r.backend)})</td><td>{_e(quant)}</td>"
                    f"<td>{status}</td><td>{format_size(r.size_bytes)}</td><td>{format_size(r.planned_bytes)}</td>"
                    f"<td>{verification}</td><td>{latency}</td></tr>")
    return f'<table class="units"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _bytes_chart(rows: list[ProgramRow]) -> str:
    """Horizontal stacked bars: each program's bytes by kind, on one scale."""
    rows = [r for r in rows if r.bytes_by_kind]
    if not rows:
        return ""
    width, label, bar, gap = 720, 150, 18, 10
    scale = max(sum(r.bytes_by_kind.values()) for r in rows) or 1
    height = len(rows) * (bar + gap) + 40
    parts = []
    for i, r in enumerate(rows):
        y = i * (bar + gap) + 10
        parts.append(f'<text x="{label - 8}" y="{y + bar - 4}" text-anchor="end">{_e(r.model)}</text>')
        x = float(label)
        for kind, colour in KIND_COLOURS.items():
            n = r.bytes_by_kind.get(kind, 0)
            w = (width - label - 90) * n / scale
            if n:
                parts.append(f'<rect class="bar" data-kind="{kind}" x="{x:.1f}" y="{y}" width="{w:.1f}" '
                             f'height="{bar}" fill="{colour}"><title>{_e(r.model)}: {KIND_WORDS[kind]} '
                             f'{format_size(n)}</title></rect>')
            x += w
        parts.append(f'<text x="{x + 6:.1f}" y="{y + bar - 4}">{format_size(sum(r.bytes_by_kind.values()))}</text>')
    legend = "".join(f'<rect x="{label + i * 140}" y="{height - 22}" width="12" height="12" fill="{c}"/>'
                     f'<text x="{label + i * 140 + 16}" y="{height - 12}">{KIND_WORDS[k]}</text>'
                     for i, (k, c) in enumerate(KIND_COLOURS.items()))
    width += 60  # the last legend entry and the totals right of the bars
    return (f'<figure><figcaption>Bytes by kind per program</figcaption><svg class="chart bytes" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">{"".join(parts)}{legend}'
            "</svg></figure>")


def _candidates_chart(r: ProgramRow) -> str:
    """Accuracy (worst SQNR, dB) against size of every candidate tried; the chosen one ringed."""
    tried = [c for c in r.candidates if c.get("size_bytes")]
    if not tried:
        return ""
    width, height, left, bottom = 620, 300, 70, 40
    sizes = [c["size_bytes"] for c in tried]
    sqnrs = [c.get("min_sqnr_db", 0.0) for c in tried]
    x0, x1 = 0.0, max(sizes) * 1.35  # room for the labels right of the points
    y0, y1 = min(0.0, min(sqnrs)), max(sqnrs) * 1.15 + 1

    def px(size: float, sqnr: float) -> tuple[float, float]:
        return (left + (width - left - 20) * (size - x0) / (x1 - x0),
                height - bottom - (height - bottom - 20) * (sqnr - y0) / (y1 - y0))

    parts = [f'<line x1="{left}" y1="{height - bottom}" x2="{width - 10}" y2="{height - bottom}" class="axis"/>',
             f'<line x1="{left}" y1="20" x2="{left}" y2="{height - bottom}" class="axis"/>',
             f'<text x="{(width + left) / 2}" y="{height - 8}" text-anchor="middle">program size</text>',
             f'<text x="14" y="{(height - bottom) / 2}" transform="rotate(-90 14 {(height - bottom) / 2})" '
             'text-anchor="middle">worst SQNR vs eager fp32 (dB)</text>']
    for i in range(4):  # ticks: sizes along the bottom, dB up the side
        size, sqnr = x0 + (x1 - x0) * i / 3, y0 + (y1 - y0) * i / 3
        tx, _ = px(size, y0)
        _, ty = px(x0, sqnr)
        anchor = "end" if i == 3 else "middle"
        parts.append(f'<text class="tick" x="{tx:.1f}" y="{height - bottom + 16}" text-anchor="{anchor}">'
                     f'{format_size(int(size))}</text><text class="tick" x="{left - 6}" y="{ty + 4:.1f}" '
                     f'text-anchor="end">{sqnr:.0f}</text>')
    for c in tried:
        x, y = px(c["size_bytes"], c.get("min_sqnr_db", 0.0))
        status = "chosen" if c.get("status") == "chosen" else c.get("status", "")
        parts.append(f'<circle class="point" data-status="{_e(status)}" cx="{x:.1f}" cy="{y:.1f}" r="6" '
                     f'fill="{STATUS_COLOURS.get(status, "#718096")}"><title>{_e(c["scheme"])}: {_e(status)}, '
                     f'{format_size(c["size_bytes"])}, {c.get("min_sqnr_db", 0.0):.1f} dB, cosine '
                     f'{c.get("min_cosine", 0.0):.4f}</title></circle>')
        if status == "chosen":
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="11" fill="none" stroke="#2f855a" stroke-width="2"/>')
        parts.append(f'<text x="{x + 12:.1f}" y="{y + 4:.1f}">{_e(c["scheme"])}'
                     f'{" (chosen)" if status == "chosen" else ""}</text>')
    for c in r.candidates:
        if not c.get("size_bytes"):
            parts.append(f'<text class="untried" x="{left + 8}" y="{28 + 14 * r.candidates.index(c)}">'
                         f'{_e(c["scheme"])}: {_e(c.get("status", ""))}</text>')
    return (f'<figure><figcaption>{_e(r.model)} on {_e(r.unit)}: candidates by {_e(r.chosen_by)} (accuracy against '
            f'size)</figcaption><svg class="chart candidates" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}" role="img">{"".join(parts)}</svg></figure>')


def _operators_chart(r: ProgramRow, top: int = 15) -> str:
    ops = [o for o in r.operators if o.get("kind") != "delegate op"][:top]
    if not ops:
        return ""
    width, label, bar, gap = 720, 300, 14, 6
    scale = max(o["median_ms"] for o in ops) or 1.0
    height = len(ops) * (bar + gap) + 10
    parts = []
    for i, o in enumerate(ops):
        y = i * (bar + gap) + 5
        w = (width - label - 110) * o["median_ms"] / scale
        parts.append(f'<text x="{label - 8}" y="{y + bar - 3}" text-anchor="end">{_e(o["name"][:42])}</text>'
                     f'<rect class="bar" x="{label}" y="{y}" width="{w:.1f}" height="{bar}" '
                     f'fill="{"#2b6cb0" if o["kind"] == "delegate" else "#dd6b20"}"><title>{_e(o["name"])}: '
                     f'{o["median_ms"]:.4f} ms a call ({o["share"]:.1%})</title></rect>'
                     f'<text x="{label + w + 6:.1f}" y="{y + bar - 3}">{o["median_ms"]:.4f} ms</text>')
    return (f'<figure><figcaption>{_e(r.model)}: time per delegate call (blue) and operator outside delegates '
            f'(orange), ms a call, on {_e(r.profiled_on)}</figcaption><svg class="chart operators" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img">{"".join(parts)}</svg>'
            "</figure>")


def _pipeline_chart(pipeline: dict[str, Any]) -> str:
    """The pipeline as a left-to-right graph: inputs, stages (in columns by depth), outputs."""
    stages = pipeline.get("stages") or []
    if not stages:
        return ""
    inputs = [str(i) for i in pipeline.get("inputs", [])]
    depth: dict[str, int] = {i: 0 for i in inputs}
    edges: list[tuple[str, str]] = []
    for s in stages:
        sources = []
        for ref in s.get("inputs", []):
            source = str(ref).split("=", 1)[-1].split(".", 1)[0]
            if source in depth:
                sources.append(source)
                edges.append((source, s["name"]))
        depth[s["name"]] = 1 + max((depth[x] for x in sources), default=0)
    outputs = []
    for o in pipeline.get("outputs", []):
        name, _, ref = str(o).partition("=")
        source = ref.split(".", 1)[0]
        outputs.append(name)
        depth[f"out:{name}"] = max(depth.values()) + 1
        if source in depth:
            edges.append((source, f"out:{name}"))
    columns: dict[int, list[str]] = {}
    for node, d in depth.items():
        columns.setdefault(d, []).append(node)
    box_w, box_h, col_w, row_h = 130, 34, 170, 56
    height = max(len(c) for c in columns.values()) * row_h + 20
    width = (max(columns) + 1) * col_w + 20
    at = {node: (10 + d * col_w, 10 + i * row_h) for d, nodes in columns.items() for i, node in enumerate(nodes)}
    ops = {s["name"]: s.get("op", "") for s in stages}
    parts = ['<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" markerHeight="6" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#4a5568"/></marker></defs>']
    for a, b in edges:
        (xa, ya), (xb, yb) = at[a], at[b]
        parts.append(f'<line class="edge" x1="{xa + box_w}" y1="{ya + box_h / 2}" x2="{xb}" y2="{yb + box_h / 2}" '
                     'stroke="#4a5568" marker-end="url(#arrow)"/>')
    for node, (x, y) in at.items():
        kind = "input" if node in inputs else "output" if node.startswith("out:") else "stage"
        title = node.removeprefix("out:")
        sub = ops.get(node, kind)
        parts.append(f'<g class="node {kind}"><rect x="{x}" y="{y}" width="{box_w}" height="{box_h}" rx="6"/>'
                     f'<text x="{x + box_w / 2}" y="{y + 14}" text-anchor="middle">{_e(title)}</text>'
                     f'<text class="op" x="{x + box_w / 2}" y="{y + 28}" text-anchor="middle">{_e(sub)}</text></g>')
    return (f'<figure><figcaption>Pipeline</figcaption><svg class="chart pipeline" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img">{"".join(parts)}</svg></figure>')


STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px; color: #1a202c; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #cbd5e0; }
table.units { border-collapse: collapse; margin: 8px 0 16px; }
table.units th, table.units td { border: 1px solid #e2e8f0; padding: 4px 8px; text-align: left; vertical-align: top; }
table.units th { background: #edf2f7; }
.failed { color: #c53030; font-weight: 600; } .built, .cached, .packaged { color: #2f855a; }
.failure { color: #c53030; font-size: 12px; }
figure { margin: 12px 0 24px; } figcaption { font-weight: 600; margin-bottom: 6px; }
svg.chart text { font: 12px system-ui, sans-serif; fill: #2d3748; }
svg.chart .axis { stroke: #4a5568; }
svg.chart .node rect { fill: #ebf8ff; stroke: #3182ce; } svg.chart .node.input rect { fill: #f0fff4; stroke: #38a169; }
svg.chart .node.output rect { fill: #fffaf0; stroke: #dd6b20; } svg.chart text.op { fill: #718096; font-size: 11px; }
.note { color: #4a5568; font-size: 12px; }
"""


def render(title: str, sections: list[TargetSection], notes: list[str]) -> str:
    body = [f"<h1>{_e(title)}</h1>"] + [f'<p class="note">{_e(n)}</p>' for n in notes]
    for t in sections:
        device = ", ".join(f"{k} {v}" for k, v in sorted(t.device.items()))
        body.append(f'<section class="target" data-target="{_e(t.target)}"><h2>{_e(t.target)}</h2>'
                    f'<p class="note">{_e(device)}; {_e(t.bundle)}</p>')
        body.append(_units_table(t.programs))
        body.append(_bytes_chart(t.programs))
        body += [_candidates_chart(r) for r in t.programs if r.candidates]
        body += [_operators_chart(r) for r in t.programs if r.operators]
        if t.pipeline:
            body.append(_pipeline_chart(t.pipeline))
        body.append("</section>")
    # A content security policy that allows nothing from anywhere: the page cannot make a request even if
    # some future change put a URL in it.
    csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{csp}">'
            f"<title>{_e(title)}</title><style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n")
