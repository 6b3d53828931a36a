"""The file to give spark-submit: `spark-submit [Spark options] validator/submit.py [flags]`.

The same command as `exactly validate`; Spark's options (master, resources, packages) come from
spark-submit's command line and are not overridden. The kafka-exactly package must be installed
in the driver's Python.
"""

from validator.command import main

if __name__ == "__main__":
    main()
