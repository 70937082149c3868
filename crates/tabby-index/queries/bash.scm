; Definitions in shell scripts: functions.
(function_definition name: (word) @name) @definition.function
