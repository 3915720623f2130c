"""Exit statuses of dejima's own commands (a session exits with its command's status)."""

SUCCESS = 0
FAILURE = 1  # a management command failed (e.g. doctor found a problem)
USAGE = 2  # bad command-line arguments
NOT_YET = 3  # the command exists but is not implemented yet
SESSION_ENDED = 4  # dejima-allow: the session ended before the change reached it (nothing changed in it)
DEJIMA_FAILED = 125  # dejima itself failed before or around the session (as `docker run` does)
COMMAND_NOT_FOUND = 127  # the session's command does not exist in the image
