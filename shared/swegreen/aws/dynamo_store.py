"""A ``ResultStore`` on DynamoDB: the same rows and keys as the SQLite store.

One table, keyed ``pk`` = run id and ``sk`` = ``RUN`` (the run's record), ``IDS#<n>``
(its selection, in items of IDS_PER_ITEM ids) or ``ROW#<instance id>`` (a row). A row
write is an upsert, so a retried step writes the same row again instead of adding one;
an ``error`` row never replaces a verdict.

No item grows with the run: DynamoDB refuses items over 400 KB, which a record holding
10,000 ids, or a progress set of them, would pass at about 4,500 rows. Progress is a
counter (``finished_count``) that a row's first write adds one to.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from boto3.dynamodb.conditions import Key

from swegreen.core.classify import Status
from swegreen.core.errors import StoreError
from swegreen.core.ports import RunRecord
from swegreen.core.results import InstanceResult, utcnow
from swegreen.core.stop_rule import EVALUATOR_REASONS

RUN_SK = "RUN"
ROW_PREFIX = "ROW#"
IDS_PREFIX = "IDS#"
IDS_PER_ITEM = 2000  # ids of up to 128 characters (ids.py): at most 262 KB an item
# Rows waiting for a participant (one partition, whatever the run: the Watch function
# reads them all). "#" is never in a run id (ids.py), so no run's partition is this one.
WAITING_PK = "#WAITING"
# A sparse index of the runs that are running: a run's item carries RUNNING_KEY only while
# its state is "running", so Resolve reads the runs that share the account's quotas with
# one Query (its grant), not a Scan of every row of every run.
RUNNING_INDEX = "running-runs"
RUNNING_KEY = "running"
RUNNING = "1"


class DynamoStore:
    def __init__(self, table: Any) -> None:
        """``table`` is a boto3 ``Table`` resource."""
        self.table = table

    def begin_run(self, record: RunRecord) -> RunRecord:
        stored = self.get_run(record.run_id)
        if stored is None:
            try:
                self._put_ids(record, 0)
                self.table.put_item(
                    Item=self._run_item(record), ConditionExpression="attribute_not_exists(pk)"
                )
                return record
            except self.table.meta.client.exceptions.ConditionalCheckFailedException:
                stored = self.get_run(record.run_id)  # a concurrent start won the race
                if stored is None:  # or the execution was stopped before this step ran
                    item = self._item(record.run_id) or {}
                    raise StoreError(
                        f"run {record.run_id} ended ({item.get('state', 'vanished')}) "
                        "before it started"
                    ) from None
        resumed = stored.resumed_by(record)
        self._set_run(resumed)
        return resumed

    def _item(self, run_id: str) -> dict[str, Any] | None:
        key = {"pk": run_id, "sk": RUN_SK}
        return self.table.get_item(Key=key, ConsistentRead=True).get("Item")

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's record; None also for a run that ended before it started (its item
        holds only a state and an error)."""
        item = self._item(run_id)
        if not item or "record" not in item:
            return None
        record = RunRecord.model_validate_json(item["record"])
        if "id_items" not in item:  # written before the ids had items of their own
            return record
        ids: list[str] = []
        chunks = {
            i["sk"]: json.loads(i["ids"])
            for i in self._items(
                self.table.query,
                KeyConditionExpression=Key("pk").eq(run_id) & Key("sk").begins_with(IDS_PREFIX),
                ConsistentRead=True,
            )
        }
        for n in range(int(item["id_items"])):
            ids += chunks.get(self._ids_sk(n), [])
        return record.model_copy(update={"instance_ids": ids})

    def update_run(self, record: RunRecord) -> None:
        self._set_run(record.model_copy(update={"updated_at": utcnow()}))

    def _set_run(self, record: RunRecord) -> None:
        """Rewrite the record's attributes, keeping the rows' progress count."""
        before = self._item(record.run_id) or {}
        self._put_ids(record, int(before.get("id_items", 0)))
        item = self._run_item(record)
        names = [k for k in item if k not in ("pk", "sk")]
        expression = "SET " + ", ".join(f"#{n} = :{n}" for n in names)
        gone = [n for n in ("summary", RUNNING_KEY) if n not in item]
        if gone:  # a resumed run has no leaderboard until it finishes again
            expression += " REMOVE " + ", ".join(gone)
        self.table.update_item(
            Key={"pk": record.run_id, "sk": RUN_SK},
            UpdateExpression=expression,
            ExpressionAttributeNames={f"#{n}": n for n in names},
            ExpressionAttributeValues={f":{n}": item[n] for n in names},
        )

    def mark_stopped(self, run_id: str, state: str, error: str) -> bool:
        """Record that a run's execution ended without finishing (cancelled, timed out,
        failed); False when the run has finished or failed already."""
        try:
            self.table.update_item(
                Key={"pk": run_id, "sk": RUN_SK},
                UpdateExpression=(
                    f"SET #state = :state, #error = :error, updated_at = :now REMOVE {RUNNING_KEY}"
                ),
                ConditionExpression="#state = :running",
                ExpressionAttributeNames={"#state": "state", "#error": "error"},
                ExpressionAttributeValues={
                    ":state": state,
                    ":error": error,
                    ":now": utcnow(),
                    ":running": "running",
                },
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            pass
        else:
            return True
        try:  # stopped before its record was written: the state alone, so it never starts
            self.table.put_item(
                Item={
                    "pk": run_id,
                    "sk": RUN_SK,
                    "state": state,
                    "error": error,
                    "updated_at": utcnow(),
                },
                ConditionExpression="attribute_not_exists(pk)",
            )
        except self.table.meta.client.exceptions.ConditionalCheckFailedException:
            return False  # finished or failed already
        return True

    def list_runs(self) -> list[RunRecord]:
        items = self._items(
            self.table.scan,
            FilterExpression="sk = :run",
            ExpressionAttributeValues={":run": RUN_SK},
        )
        runs = [
            self.get_run(i["pk"]) if "id_items" in i else RunRecord.model_validate_json(i["record"])
            for i in items
            if "record" in i
        ]
        return sorted((r for r in runs if r is not None), key=lambda r: r.updated_at)

    def list_running(self) -> list[RunRecord]:
        """The runs whose state is running, from the sparse index (eventually
        consistent: a run that began a moment ago may be missing)."""
        items = self._items(
            self.table.query,
            IndexName=RUNNING_INDEX,
            KeyConditionExpression=Key(RUNNING_KEY).eq(RUNNING),
        )
        runs = (self.get_run(i["pk"]) for i in items if i.get("state") == "running")
        return sorted((r for r in runs if r is not None), key=lambda r: r.updated_at)

    def save_result(self, run_id: str, result: InstanceResult) -> None:
        kwargs: dict[str, Any] = {
            "Item": {
                "pk": run_id,
                "sk": ROW_PREFIX + result.instance_id,
                "status": result.status.value,
                "result": result.model_dump_json(),
                "updated_at": utcnow(),
            },
            "ReturnValues": "ALL_OLD",
        }
        if result.status is Status.ERROR:  # a step that failed after the verdict was written
            kwargs["ConditionExpression"] = "attribute_not_exists(sk) OR #status = :error"
            kwargs["ExpressionAttributeNames"] = {"#status": "status"}
            kwargs["ExpressionAttributeValues"] = {":error": Status.ERROR.value}
        conflict = self.table.meta.client.exceptions.ConditionalCheckFailedException
        try:
            before = self.table.put_item(**kwargs).get("Attributes")
        except conflict:
            return  # the row's verdict stays
        if before:
            return  # a row written again: counted already
        # Progress for GET /runs/{id}: one per row's first write, and how many of them are
        # the evaluator's own failures (the green agent's stop rule reads it, stop_rule.py).
        # Rows of a run without a record have nothing to count.
        update = "ADD finished_count :one"
        values: dict[str, Any] = {":one": 1}
        if result.status is Status.ERROR and result.reason in EVALUATOR_REASONS:
            update += ", evaluator_failures :one"
            update += " SET first_failure = if_not_exists(first_failure, :why)"
            values[":why"] = f"{result.reason}: {' '.join(result.detail.split())[:300]}"
        with contextlib.suppress(conflict):
            self.table.update_item(
                Key={"pk": run_id, "sk": RUN_SK},
                UpdateExpression=update,
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues=values,
            )

    def get_results(self, run_id: str) -> dict[str, InstanceResult]:
        rows: dict[str, InstanceResult] = {}
        for item in self._items(
            self.table.query,
            KeyConditionExpression=Key("pk").eq(run_id) & Key("sk").begins_with(ROW_PREFIX),
            ConsistentRead=True,
        ):
            result = InstanceResult.model_validate_json(item["result"])
            rows[result.instance_id] = result
        return dict(sorted(rows.items()))

    def put_waiting(self, run_id: str, instance_id: str, token: str, data: str) -> None:
        """A row whose participant is still working: the Watch function polls it and
        hands ``data`` (with the patch) back to the execution through ``token``."""
        self.table.put_item(
            Item={
                "pk": WAITING_PK,
                "sk": f"{run_id}#{instance_id}",
                "token": token,
                "data": data,
                "updated_at": utcnow(),
            }
        )

    def list_waiting(self) -> list[dict[str, str]]:
        """Every waiting row: its ``sk`` (run id # instance id), ``token`` and ``data``."""
        return [
            {"sk": i["sk"], "token": i["token"], "data": i["data"]}
            for i in self._items(
                self.table.query,
                KeyConditionExpression=Key("pk").eq(WAITING_PK),
                ConsistentRead=True,
            )
        ]

    def delete_waiting(self, sk: str) -> None:
        self.table.delete_item(Key={"pk": WAITING_PK, "sk": sk})

    @staticmethod
    def _items(call: Any, **kwargs: Any) -> list[dict[str, Any]]:
        """Every item of a Query or Scan, page after page (DynamoDB stops a page at 1 MB)."""
        items: list[dict[str, Any]] = []
        while True:
            page = call(**kwargs)
            items += page.get("Items", [])
            if "LastEvaluatedKey" not in page:
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    @staticmethod
    def _ids_sk(n: int) -> str:
        return f"{IDS_PREFIX}{n:05d}"

    def _put_ids(self, record: RunRecord, had: int) -> None:
        """The selection in items of IDS_PER_ITEM ids (``had``: how many it had before)."""
        ids = record.instance_ids
        chunks = [ids[i : i + IDS_PER_ITEM] for i in range(0, len(ids), IDS_PER_ITEM)]
        for n, chunk in enumerate(chunks):
            self.table.put_item(
                Item={"pk": record.run_id, "sk": self._ids_sk(n), "ids": json.dumps(chunk)}
            )
        for n in range(len(chunks), had):
            self.table.delete_item(Key={"pk": record.run_id, "sk": self._ids_sk(n)})

    @classmethod
    def _run_item(cls, record: RunRecord) -> dict[str, Any]:
        ids = record.instance_ids
        item: dict[str, Any] = {
            "pk": record.run_id,
            "sk": RUN_SK,
            # the selection lives in its own items (_put_ids)
            "record": record.model_copy(update={"instance_ids": []}).model_dump_json(),
            "instance_count": len(ids),
            "id_items": -(-len(ids) // IDS_PER_ITEM),
            "state": record.state,
            "updated_at": record.updated_at,
        }
        if record.state == "running":
            item[RUNNING_KEY] = RUNNING
        if record.summary is not None:
            # What GET /runs/{id} returns without parsing the record (API Gateway mapping).
            item["summary"] = json.dumps(record.summary)
        return item
