"""Presign: the evaluate task's input, artifact and upload URLs, signed last thing before
it starts, and where it runs (closed or open network)."""

from __future__ import annotations

import json
import time

from swegreen.aws import prebuilt
from swegreen.aws.pipeline.base import PipelineBase
from swegreen.aws.pipeline.models import (
    SANDBOX_BATCH,
    SANDBOX_INPUT,
    SANDBOX_OUTPUTS,
    BatchPatches,
    BatchRow,
    Item,
    PatchState,
    SandboxBatch,
    SandboxInput,
    SandboxTicket,
)
from swegreen.core import errors
from swegreen.core.dataset import Instance
from swegreen.core.errors import EvaluationFailure
from swegreen.core.ports import PatchResult
from swegreen.core.recipes import RecipeBook, tests_need_network
from swegreen.core.results import utcnow
from swegreen.core.rows import error_row
from swegreen.environments.catalog import builtin_recipes
from swegreen.stores import artifacts as art


class PresignStep(PipelineBase):
    """Presign."""

    def presign(self, item: Item, state: PatchState) -> SandboxTicket:
        """The evaluate task's input, artifact and upload URLs, signed last thing before
        it starts. The task holds no credentials: these URLs reach this row's objects and
        the artifacts it starts from, and no others. A row whose environment the build
        phase could not make ends here, with the build's reason (the error's type names
        the row's reason: ``_failure_of``)."""
        if state.patch_key is None:
            raise ValueError(f"{item.instance_id}: no patch to evaluate")
        inst = self.instance(item.run_id, item.instance_id)
        key = self._row_input(item, inst, state)
        network = "open" if self._needs_internet(inst, builtin_recipes(), item) else "closed"
        return SandboxTicket(
            input_url=self._sign("get_object", key),
            network=network,
            awsvpc=self.settings.task_networks.get(network, {}),
        )

    def presign_batch(self, item: Item, patches: BatchPatches) -> SandboxTicket:
        """A batch task's manifest: every row of the batch that has a patch and no result
        yet (a retry picks up where a reclaimed task stopped: a row's result is written
        by its engine once graded), each with its own input. A row that cannot start
        (no recipe, an environment the build phase could not make) gets its error row as
        its result here, with the reason, and is not in the manifest."""
        rows, network = [], "closed"
        recipes = builtin_recipes()
        for row in item.rows():
            state = patches.rows.get(row.instance_id)
            result = self._key(row.run_id, row.instance_id, art.RESULT)
            if state is None or state.patch_key is None or self._exists(result):
                continue  # Classify writes it as it is
            inst = self.instance(row.run_id, row.instance_id)
            try:
                key = self._row_input(row, inst, state)
            except EvaluationFailure as failure:
                patch = PatchResult(None, state.model, duration=state.duration)
                failed = error_row(inst, patch, failure, 1, utcnow(), time.monotonic())
                self._put(result, failed.model_dump_json())
                continue
            if self._needs_internet(inst, recipes, row):
                network = "open"
            rows.append(
                BatchRow(
                    instance_id=row.instance_id,
                    input_url=self._sign("get_object", key),
                    model=state.model,
                )
            )
        manifest = self._key(item.run_id, item.instance_id, SANDBOX_BATCH)
        self._put(manifest, SandboxBatch(rows=rows).model_dump_json())
        return SandboxTicket(
            input_url=self._sign("get_object", manifest),
            network=network,
            awsvpc=self.settings.task_networks.get(network, {}),
        )

    def _row_input(self, item: Item, inst: Instance, state: PatchState) -> str:
        """The row's ``sandbox-input.json`` written (its artifacts' and outputs' URLs
        signed), and its key."""
        assert state.patch_key is not None
        recipes = builtin_recipes()
        needs = prebuilt.row_needs(inst, recipes)  # NoRecipe: the row's reason
        artifacts = {}
        keys = needs.keys(get_text=self._get)
        prepared = self._exists(keys["prepared"])
        for name, key in keys.items():
            if name == "repo" and prepared:
                # the prepared workspace carries the history stores its checkout borrows
                # from; the mirror, which holds the later history, stays out of the task
                continue
            if name == "repo":  # the current mirror, as its pointer names it
                pointer = self._mirror(needs.repo)
                if pointer is None:
                    raise self._unbuilt(needs, name)
                lacking = sorted(set(needs.commits) - set(pointer.commits))
                if lacking:
                    raise errors.RepoUnavailable(
                        f"{needs.repo}: the current mirror ({pointer.key}) lacks "
                        f"{', '.join(c[:12] for c in lacking)}: another run's build replaced "
                        "the pointer after this run's; run this one again"
                    )
                key = pointer.key
            if prepared if name == "prepared" else self._exists(key):
                artifacts[name] = self._sign("get_object", key)
            elif name != "prepared":  # a missing prepared workspace is made in the task
                raise self._unbuilt(needs, name)
        patch = self._get(state.patch_key)
        if patch is None:
            raise ValueError(
                f"{item.instance_id}: s3://{self.settings.bucket}/{state.patch_key} is gone"
            )
        # A row retried after a crash must not pick up an earlier attempt's verdict.
        self.s3.delete_object(
            Bucket=self.settings.bucket, Key=self._key(item.run_id, item.instance_id, art.RESULT)
        )
        uploads = {
            name: self._sign("put_object", self._key(item.run_id, item.instance_id, name))
            for name in SANDBOX_OUTPUTS
        }
        key = self._key(item.run_id, item.instance_id, SANDBOX_INPUT)
        given = SandboxInput(instance=inst, patch=patch, uploads=uploads, artifacts=artifacts)
        self._put(key, given.model_dump_json())
        return key

    @staticmethod
    def _needs_internet(inst: Instance, recipes: RecipeBook, item: Item) -> bool:
        """The rows whose tests reach real hosts upstream, by the engine's own rule."""
        asked = json.loads(item.config_json).get("network_instances") or ()
        return tests_need_network(recipes.for_instance(inst), inst.instance_id, asked)

    def _mirror(self, repo: str) -> prebuilt.MirrorPointer | None:
        return prebuilt.MirrorPointer.read(repo, self._get)

    def _unbuilt(self, needs: prebuilt.RowNeeds, name: str) -> EvaluationFailure:
        if name == "repo":
            return errors.RepoUnavailable(
                f"{needs.repo}: the build phase could not make its git mirror "
                "(see the build task's log)"
            )
        key = needs.env if name == "env" else needs.services[name.removeprefix("service-")]
        remembered = self._get(prebuilt.env_failed_key(key))
        if remembered is not None:
            return prebuilt.FailedBuild.model_validate_json(remembered).failure()
        return errors.EnvSetupFailed(
            f"environment {key} ({name}) was not built by the build phase (see the build "
            "task's log; a failure of the moment is built again by the next run)"
        )
