#include <cstdio>
int main() { std::puts("aah"); return 0; }
