"""The unit tests, in folders that follow the packages they test.

``api/`` flashrl_api, ``jobs/`` flashrl_jobs (the launcher), ``report/`` flashrl_report, and one folder a
layer of flashrl_operator (``vocab/``, ``client/``, ``render/``, ``generate/``, ``job/`` with ``job/status/``,
``experiment/``, ``run/``, ``cli/``, ``sim/``); a file that tests one module is named after it,
``test_<module>.py``, or ``test_<module>_<aspect>.py`` when several files test it (test modules need
unique names: the folders are not packages, so a module whose name another package also uses takes its
package's name too, as ``job/test_job_goodput.py``); ``project/`` checks the repository as a whole
(layout, packaging, the README's quick start). The modules beside this file (``crd_schema_tools``,
``pod_security``, ``instantiation_probe``) serve tests in several folders: pytest puts this folder on
``sys.path`` because this conftest lives here, so they import by their bare names.
"""
