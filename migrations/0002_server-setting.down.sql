DROP TABLE server_secrets;
DROP TABLE server_setting;
