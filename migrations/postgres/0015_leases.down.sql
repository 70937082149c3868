-- PostgreSQL twin of the SQLite migration migrations/0015_leases.down.sql.
DROP TABLE leases;
