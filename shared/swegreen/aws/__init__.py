"""The AWS adapters: DynamoDB store, S3 artifacts, the pipeline's steps and the sandbox task."""
