DROP TABLE ingested_documents;
DROP TABLE web_documents;
DROP TABLE read_notifications;
DROP TABLE notifications;
DROP TABLE job_runs;
