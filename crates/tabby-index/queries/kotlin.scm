; Definitions in Kotlin (tree-sitter-kotlin-ng ships no tags query).
(class_declaration name: (identifier) @name) @definition.class
(object_declaration name: (identifier) @name) @definition.object
(function_declaration name: (identifier) @name) @definition.function
