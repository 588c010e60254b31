"""verl's ``verl.plugins`` entry point: verl imports it (``EntryPoint.load``) and calls nothing, so the
``cpu`` platform is registered on import."""

from flashrl_cpu_test_plugins import register_verl

register_verl()
