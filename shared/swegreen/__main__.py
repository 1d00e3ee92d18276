from swegreen.cli import entry

entry()
