"""ReFrame's site configuration for dlscale's tests: this machine as one system with two partitions.

    local   ReFrame's local scheduler and launcher: the job runs here, as a subprocess of reframe
    slurm   the one-node SLURM cluster that .ci/run starts (scripts/slurm-cluster.sh): sbatch, srun;
            squeue for job states (the test cluster keeps no accounting for sacct)
    mpirun  the local scheduler with the mpirun launcher, for command lines (--dry-run)

The perflog keeps every performance variable of every run, one line per test run:
`<prefix>/perflogs/dlscale-ci/<partition>/<test>.log`. A site writes its own file like this one
(docs/tools.md).
"""

site_configuration = {
    "systems": [{
        "name": "dlscale-ci",
        "descr": "dlscale's test machine",
        "hostnames": [".*"],
        "modules_system": "nomod",
        "partitions": [
            {"name": "local", "descr": "this machine", "scheduler": "local", "launcher": "local",
             "environs": ["builtin"], "max_jobs": 4},
            {"name": "slurm", "descr": "the one-node SLURM test cluster", "scheduler": "squeue", "launcher": "srun",
             "access": ["--partition=debug"], "environs": ["builtin"], "max_jobs": 2},
            {"name": "mpirun", "descr": "mpirun's command lines (--dry-run only: no MPI here)", "scheduler": "local",
             "launcher": "mpirun", "environs": ["builtin"]},
        ],
    }],
    # Poll jobs at least once a second (ReFrame's default slows to one poll in 10 s): test jobs are short.
    "general": [{"poll_rate_min": 1, "poll_rate_max": 10}],
    "logging": [{
        "handlers": [{"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"}],
        "handlers_perflog": [{
            "type": "filelog",
            "prefix": "%(check_system)s/%(check_partition)s",
            "level": "info",
            "format": "%(check_job_completion_time)s|%(check_info)s|jobid=%(check_jobid)s|%(check_perfvalues)s",
            "format_perfvars": "%(check_perf_var)s=%(check_perf_value)s %(check_perf_unit)s "
                               "(ref %(check_perf_ref)s %(check_perf_lower_thres)s %(check_perf_upper_thres)s)|",
            "append": True,
        }],
    }],
}
