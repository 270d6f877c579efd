"""MkDocs hook (mkdocs.yml `hooks:`): adds the generated reference pages and the records,
and renders the `<!-- records: GROUP -->` lines of the results pages.

The pages exist only in the build (mkdocs' `File.generated`): there is nothing to commit
and nothing to get out of date. `mkdocs serve` rebuilds them on every change.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tools.docsgen import REPO, use_this_tree  # noqa: E402

use_this_tree()

from tools.docsgen import cli, errors, http_api, protos, results, train_options  # noqa: E402

PAGES = {
    "reference/cli.md": cli.render,
    "reference/train-options.md": train_options.render,
    "reference/protos.md": protos.render,
    "reference/http-api.md": http_api.render,
    "reference/errors.md": errors.render,
}


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    files.append(File.generated(config, "reference/openapi.json", content=http_api.openapi_json()))
    for group in results.curve_groups():  # next to the page that shows it
        files.append(File.generated(config, f"results/curves/{group}.png",
                                    content=results.curve_png(group)))
    for record in sorted(results.RESULTS.rglob("*")):
        if record.is_file() and record.suffix in (".json", ".yaml"):
            rel = record.relative_to(results.RESULTS).as_posix()
            files.append(File.generated(config, f"results/{results.PUBLISHED}/{rel}",
                                        content=record.read_bytes()))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return results.expand(markdown)


__all__ = ["REPO", "on_files", "on_page_markdown"]
