-- PostgreSQL twin of the SQLite migration migrations/0002_server-setting.down.sql.
DROP TABLE server_secrets;
DROP TABLE server_setting;
