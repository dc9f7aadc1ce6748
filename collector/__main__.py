import sys

from collector.cli import main

if __name__ == "__main__":  # not when a measuring process (spawn) imports the parent's main module
    sys.exit(main())
