DROP TABLE repositories;
