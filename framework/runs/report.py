"""The figures the reference pages quote, computed from the code (`decodelab report`): the claims
table (`runs.claims.run_claims`), every shipped validation CSV's error summary by chip and engine
(`runs.validation.run_validations`, `summary`) and the headline lines; `decodelab.output.report`
renders them into docs/generated/*.md and the `report:headline` block of README.md. Nothing is
logged to a tracker."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional

from decodelab.output import report as R
from decodelab.paths import VALIDATION_DIR
from decodelab.runs.claims import run_claims
from decodelab.runs.validation import mape, row_system, run_validations, summary

GENERATED = Path("docs") / "generated"  # under the checkout root
README = Path("README.md")
HEADLINE_BLOCK = "headline"
GROUPS = ("chip", "engine", "engine version")


@dataclass(frozen=True)
class Report:
    pages: Dict[str, str]  # docs/generated/<name> -> Markdown
    headline: List[str]  # the headline lines (README's report:headline block)


def validation_datasets(jobs: int = 1) -> Dict[str, dict]:
    """Per shipped CSV (by file name): its row count, rows predicted and the summary records by
    chip, engine and engine version (`all` first)."""
    csvs = sorted(VALIDATION_DIR.glob("*.csv"))
    out = {}
    for csv, df in zip(csvs, run_validations(csvs, jobs=jobs)):
        df = df.assign(
            chip=[row_system(r) for _, r in df.iterrows()],
            **{"engine version": [f"{e} {v}".strip() for e, v in zip(df["engine"], df["engine_version"])]},
        )
        ok = df[df["status"] == "ok"]
        out[csv.name] = {
            "rows": len(df),
            "predicted": len(ok),
            "groups": summary(ok, GROUPS).to_dict("records"),
            "tpot_mape": mape(ok, "tpot"),
            "ttft_mape": mape(ok, "ttft"),
            "engines": sorted(set(ok["engine"])),
            "chips": sorted(set(ok["chip"])),
        }
    return out


def headline_lines(claim_rows: List[dict], datasets: Dict[str, dict]) -> List[str]:
    passed, scored, cal = R.claims_tally(claim_rows)
    lines = [
        f"Claims: {passed} of {scored} published figures reproduced within tolerance"
        + (f" ({cal} calibration figure{'s' * (cal > 1)} not counted)." if cal else ".")
    ]
    for name, d in datasets.items():
        lines.append(
            f"Validate {name} ({d['predicted']} rows; {', '.join(d['engines'])} on "
            f"{', '.join(d['chips'])}): TPOT MAPE {d['tpot_mape']:.1f}%, TTFT MAPE {d['ttft_mape']:.1f}%."
        )
    return lines


def build_report(claim_rows: Optional[List[dict]] = None, jobs: int = 1) -> Report:
    """Every generated page (claim_rows: run_claims() rows, computed here when not given; jobs:
    worker processes of the validation rows, the same pages for any count)."""
    rows = run_claims() if claim_rows is None else claim_rows
    data = validation_datasets(jobs)
    lines = headline_lines(rows, data)
    pages = {
        "claims.md": R.claims_page(rows),
        "validation.md": R.validation_page(data),
        "headline.md": R.headline_page(lines),
    }
    return Report(pages, lines)


def expected_files(root: Path, report: Report) -> Dict[Path, str]:
    """The files the report owns under a checkout `root` and their expected content: the
    generated pages, and README.md where it has the report:headline markers."""
    files = {root / GENERATED / name: text for name, text in report.pages.items()}
    readme = root / README
    if readme.is_file():
        body = "\n".join(f"- {x}" for x in report.headline)
        text = R.replace_block(readme.read_text(encoding="utf-8"), HEADLINE_BLOCK, body)
        if text is not None:
            files[readme] = text
    return files
