from deployc.cli import entry

entry()
