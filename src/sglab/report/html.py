"""Self-contained HTML from a results dict (figures embedded as base64 PNG).

``results.json`` holds everything a report needs (claims, tables, figure paths),
so ``sglab report DIR`` can rebuild ``report.html`` at any time.
"""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path
from typing import Any

from sglab.io import atomic_write_text, finite_or_none

_STYLE = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.6em} h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
td,th{border:1px solid #ccc;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#f4f4f4} .pass{color:#137333;font-weight:600} .fail{color:#b3261e;font-weight:600}
.na{color:#777;font-weight:600} .qual{color:#a56300;font-weight:600}
figure{margin:1em 0} figcaption{font-size:.85em;color:#555}
img{max-width:100%} code{background:#f4f4f4;padding:0 .2em} .meta{color:#555;font-size:.9em}
"""


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _table(table: dict) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in table["columns"])
    rows = "".join("<tr>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>"
                   for row in table["rows"])
    title = f"<h3>{html.escape(table['title'])}</h3>" if table.get("title") else ""
    note = f"<p class=meta>{html.escape(table['note'])}</p>" if table.get("note") else ""
    return f"{title}<table><tr>{head}</tr>{rows}</table>{note}"


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _figure_bytes(name: Any, base_dir: Path) -> bytes | None:
    """The PNG file ``name`` of the report directory ``base_dir``, or None: a figure is read
    only if its path, links resolved, stays inside the report's directory and the file is a
    PNG (a crafted results.json cannot embed another file into the page)."""
    if not isinstance(name, str) or not name:
        return None
    base = base_dir.resolve()
    try:
        path = (base / name).resolve()
    except (OSError, RuntimeError, ValueError):
        return None
    if not path.is_relative_to(base) or path.suffix.lower() != ".png" or not path.is_file():
        return None
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return data if data.startswith(PNG_SIGNATURE) else None


def _figure(figure: dict, base_dir: Path) -> str:
    data = _figure_bytes(figure.get("file"), base_dir)
    if data is None:
        return f"<p class=fail>missing figure {html.escape(str(figure.get('file')))}</p>"
    data = base64.b64encode(data).decode()
    caption = html.escape(figure.get("caption", figure.get("title", "")))
    return (f"<figure><img alt='{html.escape(figure.get('title', ''))}' "
            f"src='data:image/png;base64,{data}'><figcaption>{caption}</figcaption></figure>")


VERDICT_CSS = {"REPRODUCES": "pass", "QUALITATIVE": "qual", "FAILS": "fail",
               "NOT MEASURED": "na"}


def _claims(claims: list[dict]) -> str:
    judged = any("verdict" in claim for claim in claims)
    rows = []
    for claim in claims:
        if judged:
            word = claim["verdict"]
            css = VERDICT_CSS[word]
        else:  # results written before claims were judged against the seed's numbers
            css, word = {True: ("pass", "PASS"), False: ("fail", "FAIL")}.get(
                claim.get("passed"), ("na", "N/A"))
        source = (f"<br><span class=meta>{html.escape(claim['source'])}</span>"
                  if claim.get("source") else "")
        note = (f"<br><span class=meta>{html.escape(claim['note'])}</span>"
                if claim.get("note") else "")
        rows.append(f"<tr><td><code>{html.escape(claim['id'])}</code></td>"
                    f"<td>{html.escape(claim['statement'])}{source}{note}</td>"
                    f"<td>{html.escape(claim.get('evidence', ''))}</td>"
                    f"<td class={css}>{word}</td></tr>")
    head = "verdict" if judged else "result"
    return (f"<table><tr><th>claim</th><th>statement and source</th><th>evidence</th>"
            f"<th>{head}</th></tr>" + "".join(rows) + "</table>")


def _labels_table(labels: list[dict]) -> dict:
    """One row per run: its labels (the roles an experiment gave it), seed and id."""
    metrics = ("run_id", "seed", "steps", "final", "selected")  # not labels
    keys = list(dict.fromkeys(k for row in labels for k in row if k not in metrics))
    return {"columns": [*keys, "seed", "steps", "run"],
            "rows": [[row.get(k, "") for k in keys]
                     + [row.get("seed", ""), row.get("steps", ""), row["run_id"]]
                     for row in labels]}


def describe_provenance(record: dict) -> str:
    """``sglab 0.1.0 (source ..., commit ...) on <CPU>; 27 runs trained by this command,
    0 reused from the run store; analyzed on <CPU>``."""
    from sglab.provenance import describe

    reused = "; ".join(f"{n} trained by sglab {who}"
                       for who, n in record.get("reused_trained_by", {}).items())
    return (f"sglab {describe(record.get('sglab'))}, torch {record.get('torch')}, on "
            f"{', '.join(record.get('processors') or ['-'])}; {record.get('runs_trained', 0)} runs "
            f"trained by this command, {record.get('runs_reused', 0)} reused from the run store"
            + (f" ({reused})" if reused else "")
            + (f"; analyzed on {record['analyzed_on']}" if record.get("analyzed_on") else ""))


def render_results(results: dict, base_dir: Path) -> str:
    title = results.get("title") or results.get("experiment", "sglab report")
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
             f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"]
    meta = {k: results[k] for k in ("experiment", "preset", "runs", "seconds", "created")
            if k in results}
    if meta:
        parts.append("<p class=meta>" + " · ".join(
            f"{k}: {len(v) if isinstance(v, list) else _cell(v)}" for k, v in meta.items()) + "</p>")
    if results.get("provenance"):
        parts.append(f"<p class=meta>{html.escape(describe_provenance(results['provenance']))}</p>")
    if results.get("description"):
        parts.append(f"<p>{html.escape(results['description'])}</p>")
    if results.get("claims"):
        verdicts = (f"<p class=meta>{html.escape(results['verdicts'])}</p>"
                    if results.get("verdicts") else "")
        parts.append("<h2>Claims</h2>" + verdicts + _claims(results["claims"]))
    for section in results.get("sections", []):
        parts.append(f"<h2>{html.escape(section['title'])}</h2>")
        if section.get("text"):
            parts.append(f"<p>{html.escape(section['text'])}</p>")
        parts.extend(_table(t) for t in section.get("tables", []))
        parts.extend(_figure(f, base_dir) for f in section.get("figures", []))
    if results.get("labels"):
        parts.append("<h2>Runs</h2>" + _table(_labels_table(results["labels"])))
    if results.get("config"):
        parts.append("<h2>Configuration</h2><pre>"
                     + html.escape(json.dumps(results["config"], indent=2)) + "</pre>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_report(results: dict, out_dir: Path) -> Path:
    """Write results.json and report.html into ``out_dir`` (both atomically)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "results.json",  # strict JSON: null, never a bare NaN
                      json.dumps(finite_or_none(results), indent=2, allow_nan=False) + "\n")
    path = out_dir / "report.html"
    atomic_write_text(path, render_results(results, out_dir))
    return path
