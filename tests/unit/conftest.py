"""The unit tests, in folders that follow the packages they test.

``api/`` flashrl_api, ``jobs/`` flashrl_jobs (the launcher), ``report/`` flashrl_report, and one folder a
layer of flashrl_operator (``vocab/``, ``client/``, ``render/``, ``generate/``, ``job/`` with ``job/status/``,
``experiment/``, ``run/``, ``cli/``); ``project/`` checks the repository as a whole (layout, packaging,
the README's quick start). The modules beside this file (``crd_schema_tools``, ``pod_security``,
``instantiation_probe``) serve tests in several folders: pytest puts this folder on ``sys.path`` because
this conftest lives here, so they import by their bare names.
"""
