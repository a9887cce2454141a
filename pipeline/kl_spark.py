"""spark-submit entry point for kl-spark's jobs:

    spark-submit --master spark://HOST:7077 pipeline/kl_spark.py hashtags --path DIR --topic tweets

spark-submit runs this file as a script, so the repository root is put on sys.path first (the
`pipeline` package is also importable when the project is installed, as in .venv)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pipeline.cli import main  # noqa: E402

if __name__ == "__main__":
    main()
