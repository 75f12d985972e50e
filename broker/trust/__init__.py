"""Trust: who a person is (their namespace in the pool), what they may ask the
leader to do to jobs, and the signatures that let execute machines run a job as
its owner."""
