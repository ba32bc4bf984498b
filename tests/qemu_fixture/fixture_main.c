/* Prints its own /proc/self/maps (as the runner does), then calls into the fixture library. */
#include <stdio.h>

int sme2_fixture_entry(int);

int main(void) {
  char line[512];
  FILE *maps = fopen("/proc/self/maps", "r");
  while (maps != NULL && fgets(line, sizeof line, maps) != NULL) fputs(line, stdout);
  if (maps != NULL) fclose(maps);
  printf("result %d\n", sme2_fixture_entry(7));
  return 0;
}
