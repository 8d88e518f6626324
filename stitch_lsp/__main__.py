import sys

from stitch_lsp.lsp.main import main

if __name__ == "__main__":
    sys.exit(main())
