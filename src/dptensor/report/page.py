"""One self-contained HTML page: headings, paragraphs, tables and inline PNG figures.

No network: no scripts, no fonts, no style sheets from elsewhere; every figure is a base64
``data:`` PNG rendered by matplotlib. All text is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

from matplotlib.figure import Figure

from dptensor._files import atomic_path

__all__ = ["ReportPage"]

STYLE = """
body { font-family: sans-serif; max-width: 64rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
h1 { font-size: 1.5rem; border-bottom: 2px solid #444; }
h2 { font-size: 1.15rem; margin-top: 1.8rem; border-bottom: 1px solid #bbb; }
table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.6rem; text-align: left; font-size: 0.9rem; }
th { background: #f0f0f0; }
figure { margin: 0.8rem 0; }
figure img { max-width: 100%; }
figcaption { font-size: 0.85rem; color: #555; }
.holds { color: #185f1a; font-weight: bold; }
.fails { color: #a01010; font-weight: bold; }
.note { background: #fff7d6; border-left: 4px solid #e0b000; padding: 0.4rem 0.8rem; }
code, pre { background: #f4f4f4; padding: 0.1rem 0.3rem; }
pre { white-space: pre-wrap; word-break: break-all; }
"""


class ReportPage:
    """A report under construction; :meth:`write` saves it as one self-contained HTML file.

    Parameters
    ----------
    title : str
        The page title (``<title>`` and the first heading).
    """

    def __init__(self, title: str) -> None:
        self.title = str(title)
        self._parts: list[str] = []

    def heading(self, text: str) -> ReportPage:
        """A section heading (``<h2>``)."""
        self._parts.append(f"<h2>{html.escape(text)}</h2>")
        return self

    def paragraph(self, text: str, *, css: str | None = None) -> ReportPage:
        """A paragraph of plain text (escaped); ``css`` a class of the page's style (``note``, ...)."""
        klass = f' class="{html.escape(css)}"' if css else ""
        self._parts.append(f"<p{klass}>{html.escape(text)}</p>")
        return self

    def code(self, text: str) -> ReportPage:
        """A preformatted block (a command line)."""
        self._parts.append(f"<pre>{html.escape(text)}</pre>")
        return self

    def table(self, header: Sequence[str], rows: Iterable[Sequence[object]]) -> ReportPage:
        """A table; cells are shown with ``str`` (floats with 4 significant digits, NaN as a dash)."""
        def cell(value: object) -> str:
            if isinstance(value, float):
                return "&ndash;" if math.isnan(value) else html.escape(f"{value:.4g}")
            return html.escape(str(value))

        head = "".join(f"<th>{html.escape(str(h))}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
        self._parts.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        return self

    def figure(self, fig: Figure, caption: str, *, dpi: int = 80) -> ReportPage:
        """A matplotlib figure as an inline PNG (``data:image/png;base64``) with a caption."""
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
        data = base64.b64encode(buffer.getvalue()).decode("ascii")
        alt = html.escape(caption)
        self._parts.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{alt}">'
            f"<figcaption>{alt}</figcaption></figure>"
        )
        return self

    def to_html(self) -> str:
        """The whole page."""
        title = html.escape(self.title)
        body = "\n".join(self._parts)
        return (
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<h1>{title}</h1>\n{body}\n"
            "</body>\n</html>\n"
        )

    def write(self, path: str | Path) -> Path:
        """Write the page atomically (no partial file on error); returns the path."""
        path = Path(path)
        with atomic_path(path) as tmp:
            Path(tmp).write_text(self.to_html(), encoding="utf-8")
        return path
