"""The Hydra application: compose a config, evaluate the design, write its files, print it.
MLflow logging happens in the Hydra callback (framework/apps/callbacks.py), not here."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import hydra
import hydra._internal.hydra as hydra_run
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from decodelab.apps.common import errors
from decodelab import paths
import decodelab.config.schema  # noqa: F401  (registers the typed schemas)
from decodelab.modes.dispatch import evaluate
from decodelab.core.labels import run_label
from decodelab.output.files import print_result, where_lines, write_outputs
from decodelab.apps.callbacks import recorded_run
from decodelab.config import precomposed, safety, searchpath

CONF_DIR = str(paths.CONF_DIR)
searchpath.register()  # a user's --config-dir and hydra.searchpath folders before conf/ (issue 40)


def run_design(cfg: DictConfig, out_dir: Path, show: Optional[Callable] = None) -> Dict[str, Any]:
    """Evaluate one composed config and write its files; returns what the callback logs.
    `show(name, res)`: called before the files are written (a single run prints its table
    before drawing its plots)."""
    res = evaluate(cfg)
    res.notes.extend(searchpath.run_notes(HydraConfig.get()))  # a user file read for a shipped one
    name = run_label(cfg, res["metrics"])
    if show is not None:
        show(name, res)
    cfg_dict = OmegaConf.to_container(cfg, resolve=True)
    files = write_outputs(
        cfg_dict,
        res,
        out_dir,
        name,
        plots=cfg.tracking.get("plots", True),
        step_csv=cfg.tracking.get("step_csv", True),
    )
    cfg_file = out_dir / "config_resolved.yaml"
    cfg_file.write_text(OmegaConf.to_yaml(cfg, resolve=True))
    files["config"] = str(cfg_file)
    return {"record": res.record(cfg_dict), "files": files, "name": name, "res": res}


class DataOnlyCallbacks(hydra_run.Callbacks):
    """Hydra's callbacks, instantiated only from a config that is data: Hydra.run and
    Hydra.multirun compose the config and instantiate its `hydra.callbacks` straight away (the
    launcher and sweeper next), so the composed config is checked here first (the safety net
    behind decodelab.config.check's scan of the files and overrides): one error line, exit 2."""

    def __init__(self, config: Any = None) -> None:
        if config is not None:
            try:
                safety.check_config(config)
            except safety.CodeInConfig as e:
                sys.exit(errors(str(e)))  # SystemExit passes Hydra's run_and_report
        super().__init__(config)


hydra_run.Callbacks = DataOnlyCallbacks  # what Hydra.run / multirun instantiate (hydra-core 1.3)
# a single run's config as decodelab.config.check composed it, not composed twice more by Hydra
hydra_run.ConfigLoaderImpl = precomposed.ReusingLoader

EXIT_STATUS = [0]  # set by a single run with invalid input; decodelab.apps.cli exits with it


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def job(cfg: DictConfig) -> Dict[str, Any]:
    hc = HydraConfig.get()
    done = None
    if str(hc.mode) == "RunMode.MULTIRUN":
        done = recorded_run(cfg, Path(hc.sweep.dir))  # resuming: this design is in the tracker
    single = str(hc.mode) == "RunMode.RUN"
    try:
        ret = run_design(cfg, Path(hc.runtime.output_dir), print_result if single and not cfg.quiet else None)
    except OSError as e:  # a full disk, a directory made read-only meanwhile: one line, exit 2
        EXIT_STATUS[0] = errors(
            f"{e.filename or hc.runtime.output_dir}: cannot write results ({e.strerror or e}); "
            "free space or choose another directory with hydra.run.dir=DIR"
        )
        return {}
    res = ret.pop("res")
    if done:
        # The job still writes its files (evaluating is ~10 ms of a job's ~0.3 s of Hydra), so
        # every job of the sweep has its result.json; the callback links it under this sweep's
        # parent run instead of recording the design a second time.
        ret["record"]["reused_from"] = done
        f = Path(ret["files"]["result"])
        f.write_text(json.dumps({**json.loads(f.read_text()), "reused_from": done}, indent=1, default=str))
        if not cfg.quiet:
            print(f"{ret['name']}: already recorded (MLflow run {done}); linked under this sweep")
    if not cfg.quiet and not single:
        print_result(ret["name"], res)
    if not cfg.quiet and single:  # its table was printed before the files were written
        print(*where_lines(Path(hc.runtime.output_dir), cfg.tracking), sep="\n")
    if res["status"] == "invalid" and single:
        # bad input in a single run: one line per problem, no traceback, and a non-zero exit
        # once Hydra has returned (exiting here would skip the callback that records it)
        EXIT_STATUS[0] = errors(res["reason"])
    return ret
