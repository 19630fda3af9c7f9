"""The evaluate stage's benchmarks, a package each: a benchmark depends on the framework
(tasks/evaluate: ``benchmark``, ``models``, ``prompt_templates``, ``presentation``) and the shared
packages only, never on another benchmark. ``tasks/evaluate/registry.py`` lists them in report
order."""
