#pragma once
// Eager inference: what a model needs past training to serve requests. Each
// header of forge/infer/ states its own policy.
