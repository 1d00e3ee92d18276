"""Where results live: the run/row table, the idempotency table, and the artifact bucket."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_dynamodb as ddb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from swegreen.aws.dynamo_store import RUNNING_INDEX, RUNNING_KEY
from swegreen.aws.predictions_upload import UPLOADS_PREFIX


class Storage(Construct):
    def __init__(self, scope: Construct, id: str, *, retain: bool) -> None:
        super().__init__(scope, id)
        policy = RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        # Runs and rows, keyed as the local store: pk = run id, sk = RUN | ROW#<instance id>.
        self.table = ddb.Table(
            self,
            "Results",
            partition_key=ddb.Attribute(name="pk", type=ddb.AttributeType.STRING),
            sort_key=ddb.Attribute(name="sk", type=ddb.AttributeType.STRING),
            billing_mode=ddb.BillingMode.PAY_PER_REQUEST,
            encryption=ddb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=ddb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            removal_policy=policy,
        )
        # The runs that are running (a sparse index: dynamo_store.RUNNING_KEY is set only
        # then), which Resolve reads with Query, never a Scan of every row.
        self.table.add_global_secondary_index(
            index_name=RUNNING_INDEX,
            partition_key=ddb.Attribute(name=RUNNING_KEY, type=ddb.AttributeType.STRING),
            projection_type=ddb.ProjectionType.INCLUDE,
            non_key_attributes=["state"],
        )
        # powertools' idempotency records for row writes.
        self.idempotency = ddb.Table(
            self,
            "Idempotency",
            partition_key=ddb.Attribute(name="id", type=ddb.AttributeType.STRING),
            billing_mode=ddb.BillingMode.PAY_PER_REQUEST,
            encryption=ddb.TableEncryption.AWS_MANAGED,
            time_to_live_attribute="expiration",
            removal_policy=RemovalPolicy.DESTROY,
        )
        # Datasets, predictions, and every run's artifacts and leaderboard JSON.
        self.bucket = s3.Bucket(
            self,
            "Artifacts",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[
                s3.LifecycleRule(noncurrent_version_expiration=Duration.days(30)),
                # artifact uploads are multipart: a task that died mid-upload leaves parts
                s3.LifecycleRule(abort_incomplete_multipart_upload_after=Duration.days(1)),
                # the distributed maps' result files (infra/workflow.py, MAP_RESULTS)
                s3.LifecycleRule(prefix="map-results/", expiration=Duration.days(14)),
                # predictions sent through PUT /predictions (infra/front_door.py): a run
                # copies each row's prediction to its own objects when it starts
                s3.LifecycleRule(prefix=UPLOADS_PREFIX, expiration=Duration.days(30)),
            ],
            removal_policy=policy,
            auto_delete_objects=not retain,
        )
