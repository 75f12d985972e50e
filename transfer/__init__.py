"""File transfer through the pool's Redis: a job's input and output sandboxes as
content-addressed chunks, their manifests, the submit side's upload, the execute
side's transfer step and the delivery of outputs into the job's `Iwd`."""
