; Definitions in Scala 2 and 3.
(class_definition name: (_) @name) @definition.class
(trait_definition name: (_) @name) @definition.interface
(object_definition name: (_) @name) @definition.object
(enum_definition name: (_) @name) @definition.enum
(function_definition name: (_) @name) @definition.function
(function_declaration name: (_) @name) @definition.function
