#ifndef TERMS
#define TERMS 32
#endif
