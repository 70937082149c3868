-- Named leases, each held by one process at a time until it runs out unless renewed
-- (`worker`: the one process of those sharing a database that runs the jobs and enqueues the
-- scheduled ones; the others stand by and take over when it stops renewing).
CREATE TABLE leases (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    expires_at TEXT NOT NULL
);
