DROP TABLE thread_messages;
DROP TABLE threads;
