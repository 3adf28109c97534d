"""The operator's SparkApplication entry point (``mainApplicationFile: local:///opt/knarr/spark_entry.py``).

The image copies this file to /opt/knarr/spark_entry.py. Its ``arguments`` are exactly what
follows ``knarr backfill`` on the command line, so both run the same ``main``.
"""

import sys

from knarr_spark.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
