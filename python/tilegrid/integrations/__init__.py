"""tilegrid inside other frameworks. Each integration is a subpackage imported on its own
(``import tilegrid.integrations.transformers``), so that ``import tilegrid`` needs none of
those frameworks."""
