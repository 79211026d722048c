"""The one exception type for errors a user can cause."""


class SglabError(Exception):
    """A problem with user input (config, files, run ids, ...).

    The message says what was wrong and what to do. The CLI prints it without a
    traceback and exits with status 2.
    """


class RunBusyError(SglabError):
    """The run directory is held by another live process (see ``sglab.train.lock``)."""
