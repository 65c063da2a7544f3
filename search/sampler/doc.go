// Package sampler holds sgtune's goptuna samplers: a Tree-structured Parzen
// Estimator (TPE) with correct Parzen-estimator maths, a constant liar for
// running trials and failures as observations; a uniform random sampler and
// a grid sampler. All are seeded without global state and reproducible: a
// draw depends only on the sampler's seed, the trial's number, the
// parameter's name and the trials stored in the study, so the same seed and
// the same stored trials give the same proposal, also in a new process.
//
// New builds one by name ("tpe", "tpe-univariate", "random", "grid",
// "goptuna-tpe").
package sampler
