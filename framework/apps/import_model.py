"""`decodelab import-model PATH/config.json [--name NAME] [--out-dir DIR]`: a model YAML from a
Hugging Face config.json, written to DIR/model/NAME.yaml (default ./my_conf/model/), with the
config.json key of every field in its comment; a generation_config.json beside it gives the model's
sampling defaults (`generation_defaults`, docs/model.md, "The engine's sampler").

The config.json keys it did not read are listed, and what the model schema cannot express is
named (neither is an error); a key config.json omits takes its family's transformers default
(config/hf_families.py). What it cannot represent is refused with one `error:` line, exit status 2:
KV heads that do not divide the heads, more experts per token than experts, a state-space or
linear-attention model other than the Gated DeltaNet (Qwen3-Next, Qwen3.5) and Mamba-2 (Nemotron-H)
hybrids it reads, an unknown model_type with keys it cannot map, a missing required key.
Use the model from its config directory:

  decodelab import-model ~/models/Qwen3-32B/config.json          # -> my_conf/model/qwen3_32b.yaml
  decodelab model=qwen3_32b 'hydra.searchpath=[file://my_conf]' hardware=dgx_h100
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from decodelab import paths
from decodelab.apps.common import errors
from decodelab.config import hf_model, hf_yaml
from decodelab.errors import ConfigError

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_\-]*$")


def add_arguments(p) -> None:
    p.add_argument("config", metavar="PATH", help="a Hugging Face config.json")
    p.add_argument("--name", help="the model's option name (default: the checkpoint directory's, snake_case)")
    p.add_argument("--out-dir", default="my_conf", help="config directory to write model/NAME.yaml into")
    p.add_argument("--force", action="store_true", help="overwrite an existing model/NAME.yaml")
    p.add_argument("--stdout", action="store_true", help="print the YAML instead of writing it")


def shipped(name: str) -> bool:
    return (paths.CONF_DIR / "model" / f"{name}.yaml").is_file()


def run(args) -> int:
    try:
        d = hf_model.load_json(args.config)
        name = args.name or hf_model.default_name(args.config, d)
        if not NAME.match(name):
            raise ConfigError(f"--name {name!r} must be letters, digits, '_' or '-' (it is a file name)")
        if not args.name and shipped(name):
            name += "_hf"  # a shipped model's name only when asked for: the file would shadow it
        imp = hf_model.from_config(d, name, args.config)
        hf_yaml.read_generation_config(imp, Path(args.config).expanduser().parent / "generation_config.json")
    except ConfigError as e:
        return errors(str(e))
    params = hf_yaml.parameters(imp)
    text = hf_yaml.to_yaml(imp, params)
    report = sys.stderr if args.stdout else sys.stdout  # --stdout: the YAML alone on stdout
    if args.stdout:
        print(text, end="")
    else:
        out = Path(args.out_dir) / "model" / f"{name}.yaml"
        if out.exists() and not args.force:
            return errors(f"{out} exists (--force to overwrite it)")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        v = imp.values
        print(
            f"wrote {out}: {imp.model_type} -> arch={v['arch']}, {v['n_layers']} layers, "
            f"{params['total'] / 1e9:.2f}B parameters ({params.get('active', params['total']) / 1e9:.2f}B active)"
        )
    if shipped(name):
        print(
            f"note: model={name} with this folder on the search path uses this file in place of the shipped one",
            file=report,
        )
    for n in imp.notes:
        print(f"note: {n}", file=report)
    if imp.unexpressed:
        print(f"not expressible in the model schema ({len(imp.unexpressed)}):", file=report)
        for u in imp.unexpressed:
            print(f"  {u}", file=report)
    print(f"unused config.json fields ({len(imp.unused)}): {', '.join(imp.unused) or 'none'}", file=report)
    if not args.stdout:
        print(f"use it: decodelab model={name} 'hydra.searchpath=[file://{args.out_dir}]'")
    return 0
