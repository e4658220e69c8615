"""Where the chunks of a sweep are evaluated: in this process (`-j 1`), in local worker
processes (joblib/loky, `-j N`), or on a Dask cluster (`--backend dask`: a scheduler at
`--address`, or a local cluster of N worker processes started for the sweep).

Every backend runs decodelab.runs.items.evaluate_items on chunks of jobs and yields their records
as chunks finish (in any order). Workers write each design's files under the sweep directory,
so on a cluster of several machines the sweep directory must be on a shared file system and
every worker needs decodelab (same version) and the sweep's config directories."""

from __future__ import annotations

from typing import Callable, Dict, Iterator, List, Optional

from decodelab.runs.items import evaluate_items

BACKENDS = ("local", "dask")


class BackendError(RuntimeError):
    """The backend cannot be used (extra not installed, scheduler unreachable): one line."""


class Backend:
    """A started backend (a context manager): `map(plan, work, recorded, plots)` yields chunks of
    records."""

    def __init__(self, kind: str = "local", jobs: int = 1, address: Optional[str] = None) -> None:
        if kind not in BACKENDS:
            raise BackendError(f"--backend {kind}: no such backend (options: {', '.join(BACKENDS)})")
        self.kind, self.jobs, self.address = kind, max(1, jobs), address
        self.client = self.cluster = None
        self._warming = None  # local workers' warm-up tasks (warm), drained before the sweep's
        if kind == "dask":
            self._start_dask()

    def _start_dask(self) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError:
            raise BackendError(
                "--backend dask needs Dask distributed: pip install 'decodelab[dask]'"
            ) from None
        try:
            if self.address:
                self.client = Client(self.address, timeout=10)
            else:
                self.cluster = LocalCluster(n_workers=self.jobs, threads_per_worker=1, dashboard_address=None)
                self.client = Client(self.cluster)
        except (OSError, TimeoutError) as e:
            self.close()
            raise BackendError(
                f"--address {self.address}: cannot connect to a Dask scheduler there ({type(e).__name__}: "
                f"{str(e).splitlines()[0][:200] if str(e).strip() else ''})"
            ) from None

    def warm(self, fn: Callable) -> None:
        """Start the local worker processes now, each running `fn` once (their imports, Numba's
        start: items.warm_up) while this process still plans the sweep; joblib's next call
        (map) reuses them."""
        if self.kind == "local" and self.jobs > 1 and self._warming is None:
            from joblib import Parallel, delayed

            tasks = (delayed(fn)() for _ in range(self.jobs))
            self._warming = Parallel(n_jobs=self.jobs, return_as="generator_unordered")(tasks)

    def describe(self) -> str:
        if self.kind == "dask":
            n = len(self.client.scheduler_info().get("workers", {}))
            where = self.address or "a local cluster"
            return f"Dask at {where} ({n} workers)"
        return (
            f"{self.jobs} local worker process{'es' if self.jobs > 1 else ''}"
            if self.jobs > 1
            else "this process"
        )

    def __enter__(self) -> "Backend":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._warming is not None:  # never used: the warm workers are stopped
            self._warming.close()
            self._warming = None
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def map(
        self, plan, work: List[list], recorded: Dict[str, str], plots: bool, fn: Callable = evaluate_items
    ) -> Iterator[List[dict]]:
        """`fn(source, items, sweep_dir, recorded, plots)` on each chunk of `work` (default:
        decodelab.runs.items.evaluate_items; decodelab.runs.slo_sweep passes its own)."""
        args = (str(plan.sweep_dir), recorded, plots)
        if self.kind == "dask":
            yield from self._dask(plan, work, args, fn)
        elif self.jobs <= 1:
            for items in work:
                yield fn(plan.source, items, *args)
        else:
            yield from self._joblib(plan, work, args, fn)

    def _joblib(self, plan, work, args, fn):
        """Chunks as workers finish them. Not `with Parallel(...)`: outside it an abort (Ctrl-C,
        the generator closed early) kills the workers instead of starting a fresh pool."""
        import warnings
        from joblib import Parallel, delayed

        if self._warming is not None:  # the same workers, warm: their warm-up done first
            for _ in self._warming:
                pass
            self._warming = None
        with warnings.catch_warnings():  # an interrupted sweep leaves tasks unused: expected
            warnings.filterwarnings("ignore", message=".*tasks have been successfully executed")
            warnings.filterwarnings("ignore", message=".*tasks which were still being processed")
            chunks = Parallel(n_jobs=self.jobs, return_as="generator_unordered")(
                delayed(fn)(plan.source, items, *args) for items in work
            )
            try:
                yield from chunks
            finally:
                chunks.close()

    def _dask(self, plan, work, args, fn):
        from dask.distributed import as_completed

        sweep_dir, recorded, plots = args
        (rec,) = self.client.scatter([recorded], broadcast=True)  # once, not with every chunk
        futures = [
            self.client.submit(fn, plan.source, items, sweep_dir, rec, plots, pure=False) for items in work
        ]
        try:
            for f in as_completed(futures):
                yield f.result()
        finally:
            self.client.cancel(futures)
