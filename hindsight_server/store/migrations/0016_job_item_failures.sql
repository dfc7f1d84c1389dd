-- One row per item a lifecycle job failed on (a session the consolidate job could not fold, a subject
-- the patterns job could not abstract): the job goes on with the others and leaves this item until
-- retry_at, backing off with each failure. Holds no content: the error is an exception class.
CREATE TABLE job_item_failures (
    job        text        NOT NULL,
    tenant_id  text        NOT NULL,
    item       text        NOT NULL,
    failures   int         NOT NULL,
    error      text        NOT NULL,
    failed_at  timestamptz NOT NULL,
    retry_at   timestamptz NOT NULL,
    PRIMARY KEY (job, tenant_id, item)
);
