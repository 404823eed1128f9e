/* An uninstrumented program that calls into the instrumented library.c. */
void lib_entry(void);

int main(void)
{
    lib_entry();
    return 0;
}
