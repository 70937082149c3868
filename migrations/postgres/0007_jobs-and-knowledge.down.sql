-- PostgreSQL twin of the SQLite migration migrations/0007_jobs-and-knowledge.down.sql.
DROP TABLE ingested_documents;
DROP TABLE web_documents;
DROP TABLE read_notifications;
DROP TABLE notifications;
DROP TABLE job_runs;
