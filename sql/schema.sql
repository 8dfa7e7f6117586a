-- campaign results store, schema version 6 (SQLite rendering of sql/schema.py)

CREATE TABLE campaign (
	id VARCHAR(64) NOT NULL, 
	name VARCHAR(255), 
	created_at FLOAT NOT NULL, 
	command TEXT, 
	overrides JSON, 
	results_dir TEXT, 
	host VARCHAR(255), 
	user VARCHAR(255), 
	PRIMARY KEY (id)
);

CREATE TABLE meta (
	"key" VARCHAR(64) NOT NULL, 
	value TEXT NOT NULL, 
	PRIMARY KEY ("key")
);

CREATE TABLE point (
	id INTEGER NOT NULL, 
	campaign_id VARCHAR(64) NOT NULL, 
	idx INTEGER NOT NULL, 
	platform VARCHAR(64) NOT NULL, 
	trainer VARCHAR(64) NOT NULL, 
	experiment VARCHAR(64) NOT NULL, 
	dataset VARCHAR(64) NOT NULL, 
	gpus INTEGER NOT NULL, 
	nodes INTEGER NOT NULL, 
	repeat INTEGER NOT NULL, 
	batch_per_gpu INTEGER, 
	iterations INTEGER, 
	overrides JSON, 
	config JSON, 
	executor VARCHAR(16) NOT NULL, 
	job_id VARCHAR(64), 
	job_folder TEXT, 
	log_path TEXT, 
	state VARCHAR(16) NOT NULL, 
	reason TEXT, 
	submitted_at FLOAT, 
	started_at FLOAT, 
	ended_at FLOAT, 
	signature VARCHAR(64), 
	job_signature VARCHAR(64), 
	PRIMARY KEY (id), 
	CONSTRAINT uq_point_campaign_idx UNIQUE (campaign_id, idx), 
	FOREIGN KEY(campaign_id) REFERENCES campaign (id) ON DELETE CASCADE
);
CREATE INDEX ix_point_campaign_state ON point (campaign_id, state);
CREATE INDEX ix_point_job ON point (job_id);

CREATE TABLE attempt (
	id INTEGER NOT NULL, 
	point_id INTEGER NOT NULL, 
	attempt_no INTEGER NOT NULL, 
	job_id VARCHAR(64), 
	state VARCHAR(16) NOT NULL, 
	reason TEXT, 
	world_size INTEGER, 
	started_at FLOAT, 
	ended_at FLOAT, 
	provenance JSON, 
	origin VARCHAR(16), 
	overrides JSON, 
	submitted_at FLOAT, 
	node_list TEXT, 
	PRIMARY KEY (id), 
	CONSTRAINT uq_attempt_point_no UNIQUE (point_id, attempt_no), 
	FOREIGN KEY(point_id) REFERENCES point (id) ON DELETE CASCADE
);
CREATE INDEX ix_attempt_point ON attempt (point_id);

CREATE TABLE breakdown (
	attempt_id INTEGER NOT NULL, 
	rank INTEGER NOT NULL, 
	phase VARCHAR(64) NOT NULL, 
	total_s FLOAT, 
	mean_s FLOAT, 
	median_s FLOAT, 
	p95_s FLOAT, 
	count INTEGER, 
	PRIMARY KEY (attempt_id, rank, phase), 
	FOREIGN KEY(attempt_id) REFERENCES attempt (id) ON DELETE CASCADE
);

CREATE TABLE evaluation (
	attempt_id INTEGER NOT NULL, 
	epoch INTEGER NOT NULL, 
	split VARCHAR(16) NOT NULL, 
	loss FLOAT, 
	accuracy FLOAT, 
	images INTEGER, 
	seconds FLOAT, 
	PRIMARY KEY (attempt_id, epoch, split), 
	FOREIGN KEY(attempt_id) REFERENCES attempt (id) ON DELETE CASCADE
);

CREATE TABLE iteration (
	attempt_id INTEGER NOT NULL, 
	rank INTEGER NOT NULL, 
	iter INTEGER NOT NULL, 
	warmup BOOLEAN NOT NULL, 
	iter_s FLOAT NOT NULL, 
	loss FLOAT, 
	data_s FLOAT, 
	forward_s FLOAT, 
	backward_s FLOAT, 
	step_s FLOAT, 
	comm_s FLOAT, 
	PRIMARY KEY (attempt_id, rank, iter), 
	FOREIGN KEY(attempt_id) REFERENCES attempt (id) ON DELETE CASCADE
);
CREATE INDEX ix_iteration_job ON iteration (attempt_id, warmup, iter, iter_s);

CREATE TABLE profile (
	attempt_id INTEGER NOT NULL, 
	rank INTEGER NOT NULL, 
	iterations INTEGER, 
	total_s FLOAT, 
	cpu_s FLOAT, 
	device_s FLOAT, 
	cpu_util FLOAT, 
	gpu_util FLOAT, 
	comm_s FLOAT, 
	exposed_comm_s FLOAT, 
	top_ops JSON, 
	PRIMARY KEY (attempt_id, rank), 
	FOREIGN KEY(attempt_id) REFERENCES attempt (id) ON DELETE CASCADE
);

CREATE TABLE progress (
	attempt_id INTEGER NOT NULL, 
	rank INTEGER NOT NULL, 
	seq INTEGER NOT NULL, 
	at FLOAT NOT NULL, 
	iteration INTEGER NOT NULL, 
	total INTEGER NOT NULL, 
	warmup INTEGER NOT NULL, 
	PRIMARY KEY (attempt_id, rank, seq), 
	FOREIGN KEY(attempt_id) REFERENCES attempt (id) ON DELETE CASCADE
);

CREATE TABLE rank_timing (
	attempt_id INTEGER NOT NULL, 
	rank INTEGER NOT NULL, 
	host VARCHAR(255), 
	device VARCHAR(255), 
	warmup_iterations INTEGER, 
	warmup_s FLOAT, 
	iterations INTEGER, 
	wall_s FLOAT, 
	iter_mean_s FLOAT, 
	iter_median_s FLOAT, 
	iter_p95_s FLOAT, 
	images INTEGER, 
	images_per_s FLOAT, 
	final_loss FLOAT, 
	data_wait_s FLOAT, 
	compute_s FLOAT, 
	comm_s FLOAT, 
	peak_memory_bytes FLOAT, 
	flops_per_iter FLOAT, 
	trainable_params INTEGER, 
	extra JSON, 
	PRIMARY KEY (attempt_id, rank), 
	FOREIGN KEY(attempt_id) REFERENCES attempt (id) ON DELETE CASCADE
);
