"""``nightjar bench TARGET`` modules: each builds what it measures from the stages and prints figures."""
