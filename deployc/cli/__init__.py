"""The command line. Takes arguments; gives exit codes and printed output: each command calls the stages
above, `views` and `console` are the only places that print, and `app.main` is the one error boundary."""
